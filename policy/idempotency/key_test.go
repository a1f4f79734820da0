package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	longest := strings.Repeat("k", MaxKeyLen)
	tests := []struct {
		name    string
		header  string
		want    string
		wantErr bool
	}{
		{name: "bare token", header: "order-42", want: "order-42"},
		{name: "bare uuid", header: "8e03978e-40d5-43e8-bc93-6894a57f9324", want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "bare with punctuation", header: `a:b/c?d=e&f!~`, want: `a:b/c?d=e&f!~`},
		{name: "bare with inner quote", header: `ab"c`, want: `ab"c`},
		{name: "single char", header: "x", want: "x"},
		{name: "quoted sf-string", header: `"order-42"`, want: "order-42"},
		{name: "quoted with escapes", header: `"a\"b\\c"`, want: `a"b\c`},
		{name: "255 bare", header: longest, want: longest},
		{name: "255 quoted", header: `"` + longest + `"`, want: longest},
		{name: "255 quoted all escaped", header: `"` + strings.Repeat(`\"`, MaxKeyLen) + `"`, want: strings.Repeat(`"`, MaxKeyLen)},
		{name: "empty", header: "", wantErr: true},
		{name: "empty quoted", header: `""`, wantErr: true},
		{name: "256 bare", header: longest + "k", wantErr: true},
		{name: "256 quoted", header: `"` + longest + `k"`, wantErr: true},
		{name: "very long", header: strings.Repeat("k", 10000), wantErr: true},
		{name: "space inside bare", header: "a b", wantErr: true},
		{name: "space inside quoted", header: `"a b"`, wantErr: true},
		{name: "leading space", header: " abc", wantErr: true},
		{name: "trailing space", header: "abc ", wantErr: true},
		{name: "space around quoted", header: ` "abc" `, wantErr: true},
		{name: "only space", header: " ", wantErr: true},
		{name: "tab", header: "a\tb", wantErr: true},
		{name: "NUL", header: "a\x00b", wantErr: true},
		{name: "DEL", header: "a\x7fb", wantErr: true},
		{name: "CRLF", header: "a\r\nb", wantErr: true},
		{name: "non-ASCII", header: "caf\u00e9", wantErr: true},
		{name: "non-ASCII quoted", header: "\"caf\u00e9\"", wantErr: true},
		{name: "invalid UTF-8", header: "a\xffb", wantErr: true},
		{name: "unterminated quote", header: `"abc`, wantErr: true},
		{name: "lone quote", header: `"`, wantErr: true},
		{name: "quoted with parameter", header: `"abc";x=1`, wantErr: true},
		{name: "quoted with bad escape", header: `"a\bc"`, wantErr: true},
		{name: "two quoted keys", header: `"a","b"`, wantErr: true},
		{name: "two bare keys", header: "a, b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.header)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseKey(%q) = %q, nil; want error", tt.header, got)
				}
				if !errors.Is(err, ErrMalformedKey) {
					t.Errorf("ParseKey(%q) error %v does not wrap ErrMalformedKey", tt.header, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", tt.header, err)
			}
			if got != tt.want {
				t.Errorf("ParseKey(%q) = %q, want %q", tt.header, got, tt.want)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"order-42", `"order-42"`, `"a\"b\\c"`, "", `""`, " ", `"abc";x=1`,
		"caf\u00e9", "a\x00b", `"`, strings.Repeat("k", 256), `"a","b"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := ParseKey(header)
		if err != nil {
			if !errors.Is(err, ErrMalformedKey) {
				t.Fatalf("ParseKey(%q) error %v does not wrap ErrMalformedKey", header, err)
			}
			if key != "" {
				t.Fatalf("ParseKey(%q) = %q with error", header, key)
			}
			return
		}
		if len(key) < 1 || len(key) > MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q: length %d", header, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x", header, key, key[i])
			}
		}
		// A bare key is returned as is; a quoted one re-quotes to a value
		// that parses to the same key.
		if header[0] != '"' && key != header {
			t.Fatalf("ParseKey(%q) = %q, want the header unchanged", header, key)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, err := ParseKey(quoted)
		if err != nil || again != key {
			t.Fatalf("ParseKey(%q) = %q, %v; want %q", quoted, again, err, key)
		}
	})
}

func TestFingerprint(t *testing.T) {
	base := Fingerprint("BOOK", "/rooms/1?x=1", []byte(`{"a":1}`))
	if len(base) != 64 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Fatalf("Fingerprint = %q, want 64 lowercase hex characters", base)
	}
	tests := []struct {
		name   string
		method string
		target string
		body   []byte
		same   bool
	}{
		{name: "identical", method: "BOOK", target: "/rooms/1?x=1", body: []byte(`{"a":1}`), same: true},
		{name: "other method", method: "QUERY", target: "/rooms/1?x=1", body: []byte(`{"a":1}`)},
		{name: "other path", method: "BOOK", target: "/rooms/2?x=1", body: []byte(`{"a":1}`)},
		{name: "other query", method: "BOOK", target: "/rooms/1?x=2", body: []byte(`{"a":1}`)},
		{name: "no query", method: "BOOK", target: "/rooms/1", body: []byte(`{"a":1}`)},
		{name: "other body", method: "BOOK", target: "/rooms/1?x=1", body: []byte(`{"a":2}`)},
		{name: "empty body", method: "BOOK", target: "/rooms/1?x=1", body: nil},
		{name: "shifted boundary", method: "BOOK/", target: "rooms/1?x=1", body: []byte(`{"a":1}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Fingerprint(tt.method, tt.target, tt.body)
			if (got == base) != tt.same {
				t.Errorf("Fingerprint(%q, %q, %q) = %s; equal to base = %v, want %v", tt.method, tt.target, tt.body, got, got == base, tt.same)
			}
		})
	}
	if Fingerprint("BOOK", "/r", nil) != Fingerprint("BOOK", "/r", []byte{}) {
		t.Errorf("nil and empty bodies fingerprint differently")
	}
}

// TestFingerprintFraming recomputes Fingerprint with a streaming hash:
// SHA-256 over each part (method, target, SHA-256 of the body) preceded
// by its length as 8 bytes big-endian, for targets that fit its stack
// buffer and longer ones. Requests differing only in where one part ends
// and the next begins differ.
func TestFingerprintFraming(t *testing.T) {
	want := func(method, target string, body []byte) string {
		bodySum := sha256.Sum256(body)
		h := sha256.New()
		for _, part := range [][]byte{[]byte(method), []byte(target), bodySum[:]} {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	for _, tc := range []struct{ method, target, body string }{
		{"FETCH", "/items/1", ""},
		{"LOOKUP", "/item/d-1?x=%41", `{"parameters":{"item_id":"1"}}`},
		{"BOOK", "/" + strings.Repeat("a", 300), strings.Repeat("b", 5000)},
		{strings.Repeat("M", 32), "/" + strings.Repeat("p", 8000), ""},
	} {
		if got, w := Fingerprint(tc.method, tc.target, []byte(tc.body)), want(tc.method, tc.target, []byte(tc.body)); got != w {
			t.Errorf("%s %.20s…: Fingerprint %s, want %s", tc.method, tc.target, got, w)
		}
	}
	if Fingerprint("LOOKUP", "/a", nil) == Fingerprint("LOOKUP/", "a", nil) {
		t.Error("moving a byte from the method into the target left the fingerprint unchanged")
	}
}

// TestOwnedFingerprint: bound to a person, a fingerprint differs from
// the agent's own and from another person's, is stable, is 64 lowercase
// hex, and its framing keeps owner and fingerprint apart.
func TestOwnedFingerprint(t *testing.T) {
	fp := Fingerprint("FETCH", "/guests/g-1", nil)
	alice, bob := OwnedFingerprint(fp, "alice"), OwnedFingerprint(fp, "bob")
	if alice == fp || alice == bob || alice != OwnedFingerprint(fp, "alice") {
		t.Fatalf("owned fingerprints: agent %s alice %s bob %s", fp, alice, bob)
	}
	if len(alice) != 64 || strings.ToLower(alice) != alice {
		t.Fatalf("not 64 lowercase hex: %q", alice)
	}
	if OwnedFingerprint("ab", "c") == OwnedFingerprint("a", "bc") {
		t.Fatal("framing: (ab, c) and (a, bc) collide")
	}
}
