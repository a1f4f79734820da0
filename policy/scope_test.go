package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseScope(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "two segments", in: "rcns:negotiate"},
		{name: "three segments", in: "booking:rooms:write"},
		{name: "wildcard last", in: "booking:*"},
		{name: "wildcard first", in: "*:query"},
		{name: "star star", in: "*:*"},
		{name: "digits hyphen underscore", in: "a-1:b_2"},
		{name: "one segment", in: "booking", wantErr: "two"},
		{name: "empty", in: "", wantErr: "empty"},
		{name: "empty segment", in: "booking::write", wantErr: "empty segment"},
		{name: "trailing colon", in: "booking:", wantErr: "empty segment"},
		{name: "uppercase", in: "Booking:write", wantErr: "uppercase"},
		{name: "partial wildcard", in: "booking:wr*", wantErr: "whole segment"},
		{name: "space", in: "booking: write", wantErr: "not allowed"},
		{name: "dot", in: "booking.rooms:write", wantErr: "not allowed"},
		{name: "non-ascii", in: "bööking:write", wantErr: "character 'ö' (U+00F6) is not allowed"},
		{name: "non-ascii action", in: "hotel:réad", wantErr: "character 'é' (U+00E9) is not allowed"},
		// One segment with a bad character: the character is named
		// (it was "needs at least two segments"; fresh-user review).
		{name: "non-ascii single segment", in: "é", wantErr: "character 'é' (U+00E9) is not allowed"},
		{name: "single segment", in: "hotel", wantErr: "needs at least two ':'-separated segments"},
		{name: "invalid utf-8", in: "hotel:r\xc3ad", wantErr: "byte 0xC3 (not valid UTF-8) is not allowed"},
		{name: "lone continuation byte", in: "hotel:\xa9", wantErr: "byte 0xA9 (not valid UTF-8) is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseScope(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseScope(%q) err = %v, want containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || s.String() != tt.in || s.IsZero() {
				t.Fatalf("ParseScope(%q) = %q, %v", tt.in, s, err)
			}
		})
	}
}

// TestParseScopeNamesCharacters: an offending character is named as the
// whole UTF-8 character it is, never one of its bytes read as Latin-1
// ("hotel:réad" was reported as character 'Ã'); a byte that is not
// valid UTF-8 is named as a byte.
func TestParseScopeNamesCharacters(t *testing.T) {
	for _, in := range []string{"hotel:réad", "bööking:write", "a:b€", "a:\U0001F600", "hotel:r\xc3ad", "a:\xff"} {
		_, err := ParseScope(in)
		if err == nil {
			t.Fatalf("ParseScope(%q) succeeded", in)
		}
		if msg := err.Error(); strings.ContainsAny(msg, "ÃâðÿÂ") || !utf8.ValidString(msg) {
			t.Errorf("ParseScope(%q) = %q: a byte read as a Latin-1 character", in, msg)
		}
	}
}

func TestMustParseScopePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustParseScope(bad) did not panic")
		}
	}()
	MustParseScope("BAD")
}

func TestScopeCovers(t *testing.T) {
	tests := []struct {
		name    string
		have    string
		require string
		want    bool
	}{
		{name: "equal", have: "rcns:negotiate", require: "rcns:negotiate", want: true},
		{name: "different action", have: "rcns:negotiate", require: "rcns:inspect"},
		{name: "trailing wildcard", have: "booking:*", require: "booking:write", want: true},
		{name: "trailing wildcard covers more segments", have: "booking:*", require: "booking:rooms:write", want: true},
		{name: "trailing wildcard needs a segment", have: "booking:rooms:*", require: "booking:rooms"},
		{name: "leading wildcard", have: "*:query", require: "booking:query", want: true},
		{name: "leading wildcard other action", have: "*:query", require: "booking:write"},
		{name: "leading wildcard is one segment", have: "*:query", require: "a:b:query"},
		{name: "star star", have: "*:*", require: "anything:at:all", want: true},
		{name: "middle wildcard", have: "a:*:c", require: "a:b:c", want: true},
		{name: "middle wildcard length", have: "a:*:c", require: "a:b:c:d"},
		{name: "longer have", have: "a:b:c", require: "a:b"},
		{name: "shorter have", have: "a:b", require: "a:b:c"},
		{name: "required wildcard only by wildcard", have: "rcns:negotiate", require: "rcns:*"},
		{name: "wildcard covers wildcard", have: "rcns:*", require: "rcns:*", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MustParseScope(tt.have).Covers(MustParseScope(tt.require)); got != tt.want {
				t.Errorf("%s covers %s = %v, want %v", tt.have, tt.require, got, tt.want)
			}
		})
	}
	if (Scope{}).Covers(ScopeNegotiate) || ScopeNegotiate.Covers(Scope{}) {
		t.Error("zero Scope takes part in covering")
	}
}

func TestParseAuthorityScope(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{name: "single", in: "rcns:negotiate", want: []string{"rcns:negotiate"}},
		{name: "no spaces (§24 item 22)", in: "rcns:negotiate,booking:write", want: []string{"rcns:negotiate", "booking:write"}},
		{name: "spaces (§24 item 22)", in: "rcns:negotiate, booking:write", want: []string{"rcns:negotiate", "booking:write"}},
		{name: "spaces both sides and tabs", in: " rcns:negotiate \t,\t booking:write ", want: []string{"rcns:negotiate", "booking:write"}},
		{name: "duplicates collapsed", in: "a:b, c:d, a:b", want: []string{"a:b", "c:d"}},
		{name: "empty", in: "", wantErr: "empty list"},
		{name: "only spaces", in: "  ", wantErr: "empty list"},
		{name: "empty element", in: "a:b,,c:d", wantErr: "element 2 is empty"},
		{name: "trailing comma", in: "a:b,", wantErr: "element 2 is empty"},
		{name: "bad token", in: "a:b, C:D", wantErr: "element 2"},
		{name: "space inside list not OWS", in: "a:b c:d", wantErr: "element 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAuthorityScope(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := ScopeSet(got).Strings(); !slices.Equal(s, tt.want) {
				t.Errorf("ParseAuthorityScope(%q) = %v, want %v", tt.in, s, tt.want)
			}
		})
	}
}

// TestParseAuthorityScopeLongList crosses dedupeScanMax: duplicates are
// collapsed in first-occurrence order whether found by the scan or by the
// set that replaces it, including a duplicate of a scope seen before the
// switch.
func TestParseAuthorityScopeLongList(t *testing.T) {
	var in, want []string
	for i := range dedupeScanMax + 8 {
		tok := fmt.Sprintf("s%d:read", i)
		want = append(want, tok)
		in = append(in, tok)
		if i%5 == 0 {
			in = append(in, "s0:read", tok) // an early one again, and this one
		}
	}
	got, err := ParseAuthorityScope(strings.Join(in, ", "))
	if err != nil {
		t.Fatal(err)
	}
	if s := ScopeSet(got).Strings(); !slices.Equal(s, want) {
		t.Errorf("got %v, want %v", s, want)
	}
}

func TestScopeSet(t *testing.T) {
	set, err := ParseScopes([]string{"booking:*", "rcns:negotiate", "booking:*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 2 || set.String() != "booking:*, rcns:negotiate" {
		t.Fatalf("ParseScopes = %v", set.Strings())
	}
	if _, err := ParseScopes([]string{"ok:ok", "BAD"}); err == nil || !strings.Contains(err.Error(), "BAD") {
		t.Errorf("ParseScopes(bad) err = %v", err)
	}
	tests := []struct {
		name     string
		required []string
		missing  []string
	}{
		{name: "all covered", required: []string{"booking:write", "rcns:negotiate"}},
		{name: "none required", required: nil},
		{name: "one missing", required: []string{"booking:write", "inspect:all"}, missing: []string{"inspect:all"}},
		{name: "missing deduplicated", required: []string{"inspect:all", "inspect:all", "a:b"}, missing: []string{"inspect:all", "a:b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := ParseScopes(tt.required)
			if err != nil {
				t.Fatal(err)
			}
			// ParseScopes collapses duplicates; add them back to test Missing.
			if tt.name == "missing deduplicated" {
				req = append(req, req[0])
			}
			got := ScopeSet(set.Missing(req)).Strings()
			if !slices.Equal(got, tt.missing) && !(len(got) == 0 && len(tt.missing) == 0) {
				t.Errorf("Missing = %v, want %v", got, tt.missing)
			}
		})
	}
	if s := ScopeSet(nil).Strings(); s == nil || len(s) != 0 {
		t.Errorf("nil ScopeSet Strings() = %#v", s)
	}
}

// coversBySplit is the definition Scope.Covers implements without
// allocating (kept as the reference of TestCoversMatchesSplit).
func coversBySplit(s, r string) bool {
	if s == "" || r == "" {
		return false
	}
	if s == r {
		return true
	}
	ts, rs := strings.Split(s, ":"), strings.Split(r, ":")
	for i, t := range ts {
		if i >= len(rs) {
			return false
		}
		if t == "*" && i == len(ts)-1 {
			return true
		}
		if t != "*" && t != rs[i] {
			return false
		}
	}
	return len(ts) == len(rs)
}

func TestCoversMatchesSplit(t *testing.T) {
	toks := []string{"*", "a", "b", "a:b", "a:*", "a:b:c", "a:*:c", "*:b", "a:b:*", "a:c", "b:*", "a:b:c:d", "*:*", "a::b", "a:"}
	for _, x := range toks {
		for _, y := range toks {
			got := Scope{tok: x}.Covers(Scope{tok: y})
			if want := coversBySplit(x, y); got != want {
				t.Errorf("Scope(%q).Covers(%q) = %v, want %v", x, y, got, want)
			}
		}
	}
}
