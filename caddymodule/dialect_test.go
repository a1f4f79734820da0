package caddymodule

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRCNSIdempotencyKeyAlias is ../shared/cases/04 on the engine: the
// reference client's RCNS-Idempotency-Key keys a request as
// Idempotency-Key does (one execution, the repeat a replay), whichever
// of the two a retry uses; both at once must name one key; a malformed
// or repeated alias is refused naming it. Nothing runs twice.
func TestRCNSIdempotencyKeyAlias(t *testing.T) {
	url, calls := countingUpstream(t)
	g := &testGateway{h: benchHandler(t, url, false)}
	body := map[string]any{"parameters": map[string]any{}}

	first := g.do(t, "FETCH", "/items/1", body, "RCNS-Idempotency-Key", "k-alias")
	if first.status != 200 || first.hdr("Idempotent-Replayed") != "" {
		t.Fatalf("first keyed call: %s", first)
	}
	for _, repeat := range []struct {
		name string
		kv   []string
	}{
		{"the alias again", []string{"RCNS-Idempotency-Key", "k-alias"}},
		{"Idempotency-Key, same key", []string{"Idempotency-Key", "k-alias"}},
		{"the alias as a quoted string", []string{"RCNS-Idempotency-Key", `"k-alias"`}},
		{"both headers, one key", []string{"Idempotency-Key", `"k-alias"`, "RCNS-Idempotency-Key", "k-alias"}},
		{"X-Idempotency-Key beside the alias, one key", []string{"RCNS-Idempotency-Key", "k-alias", "X-Idempotency-Key", "k-alias"}},
	} {
		t.Run(repeat.name, func(t *testing.T) {
			a := g.do(t, "FETCH", "/items/1", body, repeat.kv...)
			if a.status != 200 || a.hdr("Idempotent-Replayed") != "true" {
				t.Fatalf("repeat: %s (Idempotent-Replayed %q), want the stored 200 replayed", a, a.hdr("Idempotent-Replayed"))
			}
		})
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the upstream was called %d times for one key, want 1", n)
	}
	// The alias key is the key: another request under it is a reuse.
	wantError(t, g.do(t, "FETCH", "/items/2", body, "RCNS-Idempotency-Key", "k-alias"), 422, "idempotency-key-reused", "")

	for _, tc := range []struct {
		name, reason, expl string
		hdr                http.Header
	}{
		{"both headers, different keys", "ambiguous-idempotency-key", "Idempotency-Key and RCNS-Idempotency-Key (its alias) carry different keys",
			http.Header{"Idempotency-Key": {"k-a"}, "Rcns-Idempotency-Key": {"k-b"}}},
		{"malformed alias", "invalid-idempotency-key", "RCNS-Idempotency-Key must be 1-255 visible ASCII characters",
			http.Header{"Rcns-Idempotency-Key": {"a b"}}},
		{"malformed alias beside a good key", "invalid-idempotency-key", "RCNS-Idempotency-Key must be",
			http.Header{"Idempotency-Key": {"k-a"}, "Rcns-Idempotency-Key": {`"open`}}},
		{"alias twice", "duplicate-header", "the RCNS-Idempotency-Key header appears more than once",
			http.Header{"Rcns-Idempotency-Key": {"k-a", "k-a"}}},
		// X-Idempotency-Key alone keyed nothing, and each repeat ran
		// again (helper-77): now refused, naming Idempotency-Key.
		{"X-Idempotency-Key alone", "invalid-idempotency-key", "X-Idempotency-Key is not read by this gateway",
			http.Header{"X-Idempotency-Key": {"k-x"}}},
		{"X-Idempotency-Key beside another key", "ambiguous-idempotency-key", "Idempotency-Key and X-Idempotency-Key carry different keys",
			http.Header{"Idempotency-Key": {"k-a"}, "X-Idempotency-Key": {"k-x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.hdr["Agent-Id"] = []string{benchAgent}
			tc.hdr["Authority-Scope"] = []string{testScope}
			tc.hdr["Content-Type"] = []string{"application/json"}
			raw := `{"parameters":{}}`
			a := g.serveHeader(t, "FETCH", "/items/3", tc.hdr, strings.NewReader(raw), int64(len(raw)))
			wantError(t, a, 400, tc.reason, tc.expl)
		})
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("refused requests reached the upstream: %d calls, want 1", n)
	}
}

// TestAllowRCNSUnknownValue is ../shared/cases/04 with RCNS §24 item
// 18: on a pair no endpoint serves, an Allow-RCNS value other than
// "true" ("optimistic", the reference client's; "TRUE"; "1"; empty)
// gets the answer of an absent header (404 not-found, or 405 on a path
// served under other methods; no gate evaluation, no RCNS signal),
// whose explanation names the value and the accepted ones, and not the
// server's mode. Where lock 2 decides nothing (a Tier B endpoint) the
// header changes nothing.
func TestAllowRCNSUnknownValue(t *testing.T) {
	url, calls := countingUpstream(t)
	g := &testGateway{h: benchHandler(t, url, false)}
	lookup := map[string]any{"parameters": map[string]any{"item_id": "1"}}
	for _, v := range []string{"optimistic", "TRUE", "True", "1", "yes", ""} {
		t.Run(strconv.Quote(v), func(t *testing.T) {
			hint := "Allow-RCNS " + strconv.Quote(v) + ` is not a value this gateway understands and was read as no opt-in, like an absent header: the accepted values are "true"`
			a := g.do(t, "LOOKUP", "/item/k-"+strconv.Itoa(len(v)), lookup, "Allow-RCNS", v)
			wantError(t, a, 404, "not-found", "no endpoint serves LOOKUP /item/k-"+strconv.Itoa(len(v))+"; "+hint)
			absent := g.do(t, "LOOKUP", "/item/k-"+strconv.Itoa(len(v)), lookup)
			if !slices.Equal(keys(a.body), keys(absent.body)) || a.body["retryable"] != absent.body["retryable"] {
				t.Errorf("body %s, want the members of an absent header's %s", a, absent)
			}
			if a.hdr("RCNS-Attempt-Id") != "" || strings.Contains(a.str("explanation"), "optimistic)") {
				t.Errorf("RCNS-Attempt-Id %q, explanation %q: want no gate evaluation and no mode named", a.hdr("RCNS-Attempt-Id"), a.str("explanation"))
			}
			// A path served under other methods: the absent header's 405.
			m := g.do(t, "BOOK", "/items/1", lookup, "Allow-RCNS", v)
			wantError(t, m, 405, "method-not-allowed", "the path is served under other methods; "+hint)
		})
	}
	wantError(t, g.do(t, "LOOKUP", "/item/k-f", lookup, "Allow-RCNS", "false"), 404, "not-found", "")
	wantError(t, g.do(t, "LOOKUP", "/item/k-f", lookup), 404, "not-found", "")
	if n := calls.Load(); n != 0 {
		t.Fatalf("refused requests made %d upstream calls", n)
	}
	if a := g.do(t, "FETCH", "/items/1", map[string]any{"parameters": map[string]any{}}, "Allow-RCNS", "optimistic"); a.status != 200 {
		t.Fatalf("a Tier B call with Allow-RCNS: optimistic: %s, want 200", a)
	}
	if a := g.do(t, "LOOKUP", "/item/k-t", lookup, "Allow-RCNS", "true"); a.status != 263 {
		t.Fatalf("Allow-RCNS: true: %s, want 263", a)
	}
}
