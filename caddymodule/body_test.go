package caddymodule

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"
)

// TestContentEncodingRefused: a body sent with a content coding is 415
// unsupported-content-encoding naming the coding, with Accept-Encoding:
// identity (RFC 9110 §15.5.16, §12.5.3); it was read as JSON and
// refused as 400 invalid-json "syntax error at byte 0".
func TestContentEncodingRefused(t *testing.T) {
	g := newTestGateway(t)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write([]byte(`{"parameters":{}}`))
	_ = zw.Close()
	plain := []byte(`{"parameters":{}}`)
	tests := []struct {
		name, encoding, method, target string
		agent                          bool
		body                           []byte
		coding                         string // named in the refusal; "" when served
	}{
		{name: "gzip", encoding: "gzip", method: "DISCOVER", target: "/methods", agent: true, body: zipped.Bytes(), coding: `"gzip"`},
		{name: "gzip anonymous", encoding: "gzip", method: "DISCOVER", target: "/", body: zipped.Bytes(), coding: `"gzip"`},
		{name: "gzip Tier B", encoding: "gzip", method: "FETCH", target: "/items/1", agent: true, body: zipped.Bytes(), coding: `"gzip"`},
		{name: "br on a plain body", encoding: "br", method: "DISCOVER", target: "/methods", agent: true, body: plain, coding: `"br"`},
		{name: "list", encoding: "identity, GZIP", method: "DISCOVER", target: "/methods", agent: true, body: zipped.Bytes(), coding: `"GZIP"`},
		{name: "identity", encoding: "identity", method: "DISCOVER", target: "/methods", agent: true, body: plain},
		{name: "no body", encoding: "gzip", method: "DISCOVER", target: "/methods", agent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Content-Encoding": tc.encoding, "Content-Type": "application/json"}
			if tc.agent {
				hdr["Agent-ID"], hdr["Authority-Scope"] = benchAgent, testScope
			}
			a := g.serve(t, tc.method, tc.target, hdr, bytes.NewReader(tc.body), int64(len(tc.body)))
			if tc.coding == "" {
				if a.status != 200 {
					t.Fatalf("answer %s; want 200", a)
				}
				return
			}
			wantError(t, a, 415, "unsupported-content-encoding", "Content-Encoding "+tc.coding+" is not supported")
			wantAGTPAnswer(t, a)
			if got := a.hdr("Accept-Encoding"); got != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", got)
			}
		})
	}
	if a := g.do(t, "DISCOVER", "/methods", map[string]any{"parameters": map[string]any{}}); a.hdr("Accept-Encoding") != "" {
		t.Errorf("an answer to a plain body carries Accept-Encoding %q", a.hdr("Accept-Encoding"))
	}
}

// TestTaskIDForm: the Task-ID header and the envelope task_id follow
// one rule (agtp.ValidTaskID: 1-256 visible ASCII characters) and a
// malformed one, empty included, is 400 invalid-task-id and never
// echoed. The header was echoed raw with spaces and non-ASCII bytes;
// the envelope took "a b" and silently dropped "".
func TestTaskIDForm(t *testing.T) {
	g := newTestGateway(t)
	long := strings.Repeat("t", 256)
	for _, ok := range []string{"task-0042", "7c9e6679-7425-40de-944b-e07fc1f90ae7", `a"b\c,{}`, long} {
		for _, how := range []string{"header", "envelope"} {
			var a *answer
			if how == "header" {
				a = g.do(t, "FETCH", "/items/1", nil, "Authority-Scope", "bench:read", "Task-ID", ok)
			} else {
				a = g.do(t, "FETCH", "/items/1", map[string]any{"task_id": ok}, "Authority-Scope", "bench:read")
			}
			if a.status != 200 || a.hdr("Task-ID") != ok || a.str("task_id") != ok || attributionPayload(t, a)["task_id"] != ok {
				t.Fatalf("%s task id %q: %s, Task-ID %q; want 200 echoing it in the header, the body and the record", how, ok, a, a.hdr("Task-ID"))
			}
		}
	}
	bad := []string{"", "a b", " a", "a\tb", "caf\xc3\xa9", "caf\xe9", "a\x00", "\x7f", long + "t"}
	for _, v := range bad {
		for _, anonymous := range []bool{false, true} {
			hdr := map[string]string{"Task-ID": v}
			if !anonymous {
				hdr["Agent-ID"], hdr["Authority-Scope"] = benchAgent, testScope
			}
			a := g.serve(t, "DISCOVER", "/methods", hdr, nil, 0)
			wantError(t, a, 400, "invalid-task-id", "the Task-ID header must be 1-256 visible ASCII characters")
			wantAGTPAnswer(t, a)
			if a.hdr("Task-ID") != "" || a.body["task_id"] != nil {
				t.Fatalf("Task-ID %q echoed: header %q, body task_id %v", v, a.hdr("Task-ID"), a.body["task_id"])
			}
		}
		a := g.do(t, "DISCOVER", "/methods", map[string]any{"task_id": v})
		wantError(t, a, 400, "invalid-task-id", "the envelope task_id must be 1-256 visible ASCII characters")
		if a.hdr("Task-ID") != "" || a.body["task_id"] != nil {
			t.Fatalf("task_id %q echoed: header %q, body task_id %v", v, a.hdr("Task-ID"), a.body["task_id"])
		}
	}
	for _, v := range []any{5, true, []any{"t"}, map[string]any{}} {
		wantError(t, g.do(t, "DISCOVER", "/methods", map[string]any{"task_id": v}), 400, "invalid-task-id", "the envelope task_id must be a string, not ")
	}
	// null is "not given"; with a valid header, a malformed envelope
	// task_id is still refused (the rule holds for each).
	if a := g.do(t, "DISCOVER", "/methods", map[string]any{"task_id": nil}); a.status != 200 || a.hdr("Task-ID") != "" {
		t.Fatalf("task_id null: %s, Task-ID %q; want 200 without Task-ID", a, a.hdr("Task-ID"))
	}
	a := g.do(t, "DISCOVER", "/methods", map[string]any{"task_id": "a b"}, "Task-ID", "t-1")
	wantError(t, a, 400, "invalid-task-id", "envelope task_id")
	if a.hdr("Task-ID") != "t-1" {
		t.Fatalf("Task-ID %q, want the header's t-1", a.hdr("Task-ID"))
	}
}

// TestContentTypeChecked: a body needs exactly one JSON Content-Type
// (spec OP-30; Content-Type is a singleton field, RFC 9110 §8.3), with
// no charset but UTF-8. Two Content-Type fields were accepted and the
// first one read.
func TestContentTypeChecked(t *testing.T) {
	g := newTestGateway(t)
	body := `{"parameters":{}}`
	for _, tc := range []struct {
		name  string
		types []string
		expl  string // "" when served
	}{
		{"json", []string{"application/json"}, ""},
		{"json with charset", []string{"application/json; charset=utf-8"}, ""},
		{"json with charset in capitals", []string{"application/json; charset=UTF-8"}, ""},
		// Bodies are decoded as UTF-8 (RFC 8259 §8.1): another charset
		// is refused, not read wrongly (it was accepted; fresh-user review).
		{"json utf-16", []string{"application/json;charset=utf-16"}, `Content-Type charset "utf-16" is not accepted`},
		{"agtp latin-1", []string{"application/vnd.agtp+json; charset=iso-8859-1"}, `Content-Type charset "iso-8859-1" is not accepted`},
		{"agtp", []string{"application/vnd.agtp+json"}, ""},
		{"missing", nil, "needs a JSON Content-Type"},
		{"empty", []string{""}, "needs a JSON Content-Type"},
		{"text", []string{"text/plain"}, `Content-Type "text/plain" is not accepted`},
		{"twice, both JSON", []string{"application/json", "application/json"}, "Content-Type appears 2 times"},
		{"twice, JSON first", []string{"application/json", "text/plain"}, "Content-Type appears 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{"Agent-Id": {benchAgent}, "Authority-Scope": {testScope}}
			if tc.types != nil {
				hdr["Content-Type"] = tc.types
			}
			a := g.serveHeader(t, "DISCOVER", "/methods", hdr, strings.NewReader(body), int64(len(body)))
			if tc.expl == "" {
				if a.status != 200 {
					t.Fatalf("answer %s; want 200", a)
				}
				return
			}
			wantError(t, a, 400, "unsupported-content-type", tc.expl)
			wantAGTPAnswer(t, a)
		})
	}
}

// TestInexactIntegerRefused: an integer beyond ±2^53 in a request body
// was decoded to float64 and sent on rounded (12345678901234567891 went
// upstream as 12345678901234567000); it is now 400 invalid-json naming
// where it is. Integers up to 2^53, numbers written as floats and long
// digit runs inside strings still pass.
func TestInexactIntegerRefused(t *testing.T) {
	g := newTestGateway(t)
	for _, tc := range []struct {
		body string
		ptr  string // "" when served
	}{
		{`{"parameters":{"id":9007199254740992}}`, ""},
		{`{"parameters":{"id":-9007199254740992}}`, ""},
		{`{"parameters":{"id":"12345678901234567891"}}`, ""},
		{`{"parameters":{"x":1.2345678901234567891}}`, ""},
		{`{"parameters":{"x":12345678901234567891e0}}`, ""},
		{`{"parameters":{"x":12345678901234567891.0}}`, ""}, // a float by its form: rounded, as documented
		{`{"parameters":{"x":0.0000000000000000001}}`, ""},
		{`{"parameters":{"id":9007199254740993}}`, "/parameters/id"},
		{`{"parameters":{"id":-9007199254740993}}`, "/parameters/id"},
		{`{"parameters":{"id":12345678901234567891}}`, "/parameters/id"},
		{`{"parameters":{"ids":[1,2,123456789012345678901234567890]}}`, "/parameters/ids/2"},
	} {
		a := g.serve(t, "DISCOVER", "/methods", map[string]string{"Agent-ID": benchAgent, "Authority-Scope": testScope},
			strings.NewReader(tc.body), int64(len(tc.body)))
		if tc.ptr == "" {
			if a.status != 200 {
				t.Errorf("%s: answer %s; want 200", tc.body, a)
			}
			continue
		}
		wantError(t, a, 400, "invalid-json", "the integer at "+tc.ptr+" has ")
	}
}

// TestRefusalsDoNotEchoBodies: a refusal quoting a value from the body
// quotes at most a short cut of it, and every explanation is bounded, so
// no answer sends a body back. Each of these answered about 500 kB (1 MB
// for the semantic value, quoted in explanation and problems).
func TestRefusalsDoNotEchoBodies(t *testing.T) {
	g := newTestGateway(t)
	long := strings.Repeat("é", 250_000) // 500 kB
	semantic := proposal("/item/s1")
	semantic["endpoint"].(map[string]any)["semantic"].(map[string]any)["impact"] = long
	for _, tc := range []struct {
		name, method, target string
		body                 any
		status               int
		reason               string
	}{
		{"unknown envelope field", "FETCH", "/items/1", map[string]any{long: 1}, 400, "invalid-envelope"},
		{"INSPECT target", "INSPECT", "/", map[string]any{"parameters": map[string]any{"target": long}}, 400, "unknown-target"},
		{"REVOKE target", "REVOKE", "/", map[string]any{"parameters": map[string]any{"target": long}}, 400, "unknown-target"},
		{"envelope method string", "DISCOVER", "/patterns", map[string]any{"method": long}, 400, "method-mismatch"},
		{"envelope method object", "DISCOVER", "/patterns", map[string]any{"method": map[string]any{"x": long}}, 400, "method-mismatch"},
		{"parameter conflict", "DISCOVER", "/methods", map[string]any{"parameters": map[string]any{long: 1}, long: 2}, 400, "parameter-conflict"},
		{"PROPOSE semantic value", "PROPOSE", "/", map[string]any{"parameters": semantic}, 400, "invalid-semantic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := g.do(t, tc.method, tc.target, tc.body)
			wantError(t, a, tc.status, tc.reason, "")
			if len(a.raw) > 4096 {
				t.Errorf("the %d answer is %d bytes", tc.status, len(a.raw))
			}
		})
	}
}

// TestIdempotencyKeyBeforeInput: an Idempotency-Key reused for a
// different request is 422 idempotency-key-reused even when the new
// input is invalid (spec §11.2 checks the key first); it was answered
// 422 invalid-input. A key whose first use was refused for its input is
// released, not stored: the next request with it runs.
func TestIdempotencyKeyBeforeInput(t *testing.T) {
	g := newTestGateway(t)
	syn := g.do(t, "LOOKUP", "/item/k-1", map[string]any{"parameters": map[string]any{"item_id": "1"}}, "Allow-RCNS", "true")
	if syn.status != 263 {
		t.Fatalf("synthesis: %s", syn)
	}
	for _, tc := range []struct {
		name, method, target string
		valid, invalid       any
	}{
		{"contract by pair", "LOOKUP", "/item/k-1",
			map[string]any{"parameters": map[string]any{"item_id": "1"}}, map[string]any{"parameters": map[string]any{"item_id": ""}}},
		{"Tier B", "FETCH", "/items/1", nil, map[string]any{"parameters": map[string]any{"bogus": 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, fresh := `"k-`+tc.method+`"`, `"fresh-`+tc.method+`"`
			if a := g.do(t, tc.method, tc.target, tc.valid, "Idempotency-Key", key); a.status != 200 {
				t.Fatalf("first use of the key: %s", a)
			}
			wantError(t, g.do(t, tc.method, tc.target, tc.invalid, "Idempotency-Key", key), 422, "idempotency-key-reused", "")
			// A fresh key refused for its input is not kept.
			wantError(t, g.do(t, tc.method, tc.target, tc.invalid, "Idempotency-Key", fresh), 422, "invalid-input", "")
			if a := g.do(t, tc.method, tc.target, tc.valid, "Idempotency-Key", fresh); a.status != 200 || a.hdr("Idempotent-Replayed") != "" {
				t.Fatalf("the key after its refused first use: %s, want a fresh 200", a)
			}
		})
	}
}

// TestUpstreamLargeIntegersExact: an upstream's integers beyond ±2^53
// (64-bit ids, nanosecond timestamps) reach the agent exactly, through a
// Tier B endpoint, a synthesis (263) and a contract presentation. They
// were decoded to float64: 12345678901234567891 arrived as
// 12345678901234567000.
func TestUpstreamLargeIntegersExact(t *testing.T) {
	up := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"1","name":"bench item","price":12.5,"sku":12345678901234567891,"ts":-9007199254740993,"ids":[18446744073709551616,2]}`))
	}))
	g := &testGateway{h: benchHandler(t, up.URL, false)}
	exact := []string{`"sku":12345678901234567891`, `"ts":-9007199254740993`, `"ids":[18446744073709551616,2]`}
	check := func(name string, a *answer, status int) {
		t.Helper()
		if a.status != status {
			t.Fatalf("%s: %s, want %d", name, a, status)
		}
		for _, s := range exact {
			if !strings.Contains(a.raw, s) {
				t.Errorf("%s: the answer lacks %s: %s", name, s, a.raw)
			}
		}
	}
	check("Tier B", g.do(t, "FETCH", "/items/1", nil, "Authority-Scope", "bench:read"), 200)
	body := map[string]any{"parameters": map[string]any{"item_id": "1"}}
	syn := g.do(t, "LOOKUP", "/item/big", body, "Allow-RCNS", "true")
	check("synthesis", syn, 263)
	check("presentation", g.do(t, "LOOKUP", "/item/big", body, "Contract-Synthesized", syn.hdr("Contract-Synthesized")), 200)
}

// TestEnvelopeMethodTypeNamed: an envelope method that is not a string
// is named by its JSON type, once ("a number"); it read "a a number".
func TestEnvelopeMethodTypeNamed(t *testing.T) {
	g := newTestGateway(t)
	for body, want := range map[string]string{`{"method":123}`: "the envelope method a number differs", `{"method":true}`: "the envelope method a boolean differs"} {
		a := g.serve(t, "DISCOVER", "/patterns", map[string]string{"Agent-ID": benchAgent, "Authority-Scope": testScope}, strings.NewReader(body), int64(len(body)))
		wantError(t, a, 400, "method-mismatch", want)
	}
}

// TestUnknownEnvelopeFieldNamed: a plain object sent without the
// envelope (as the Python reference client does) is refused naming the
// least unknown field, the same on every try (the answer ranged over a
// map and named a random one).
func TestUnknownEnvelopeFieldNamed(t *testing.T) {
	g := newTestGateway(t)
	body := map[string]any{"nights": 2, "item_id": "1", "check_in": "2026-12-01", "task_id": "t-1"}
	for range 20 {
		a := g.do(t, "FETCH", "/items/1", body)
		wantError(t, a, 400, "invalid-envelope", `unknown envelope field "check_in"`)
	}
}
