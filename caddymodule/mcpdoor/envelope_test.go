package mcpdoor

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// envelopeCase is a request of TestMCPEnvelopeRules and its answer:
// code 0 is a message the door serves (HTTP 200, every call answered
// with its own id, ids holding them in order); otherwise the JSON-RPC
// error code of a refusal (HTTP 400) and words its message must hold,
// and the refusal's id: the request's, when it could be read.
type envelopeCase struct {
	fastCase
	code int
	want []string // refusal: words of the message; served: the answers' ids, as JSON
	id   string   // refusal: the answer's id, as JSON; "" is null
}

func envelopeCases() []envelopeCase {
	call := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`
	}
	batch := func(ids ...string) string {
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = call(id)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	old := map[string][]string{"Mcp-Protocol-Version": {"2025-03-26"}} // the revision with batches
	c := func(name, body string, fast bool) fastCase { return fastCase{name: name, body: body, fast: fast} }
	b := func(name, body string) fastCase { return fastCase{name: name, body: body, hdr: old} }
	return []envelopeCase{
		// D1: a batch whose calls share an id is refused whole.
		{b("batch ids 2 and 2", batch("2", "2")), -32600, []string{"two calls of the batch have the id 2", "message 1", "nothing in the batch ran"}, ""},
		{b("batch ids 1.5 and 1", batch("1.5", "1")), -32600, []string{"1.5", "not an integer"}, ""},
		{b("batch ids equal strings", batch(`"a"`, `"\u0061"`)), -32600, []string{`the id "a"`}, ""},
		{b("batch ids 1, 2, 1", batch("1", "2", "1")), -32600, []string{"the id 1", "message 2"}, ""},
		{b("batch ids 1 and \"1\"", batch("1", `"1"`)), 0, []string{"1", `"1"`}, ""},
		{b("batch ids 1 and 2", batch("1", "2")), 0, []string{"1", "2"}, ""},
		{b("batch call and notification", "["+call("1")+`,{"jsonrpc":"2.0","method":"notifications/initialized"}]`), 0, []string{"1"}, ""},
		{c("a byte order mark first", "\ufeff"+call("1"), false), -32700, []string{"byte order mark", "RFC 8259"}, ""},
		// D2: ids the door cannot echo exactly.
		{c("id 1.5", call("1.5"), false), -32600, []string{"1.5", "string or an integer"}, ""},
		{c("id 1.0", call("1.0"), false), -32600, []string{"1.0", "not an integer"}, ""},
		{c("id 1e3", call("1e3"), false), -32600, []string{"1e3"}, ""},
		{c("id -0", call("-0"), false), -32600, []string{"-0"}, ""},
		{c("id 2^53+1", call("9007199254740993"), false), -32600, []string{"16 digits beyond ±2^53"}, ""},
		{c("id -2^53-1", call("-9007199254740993"), false), -32600, []string{"beyond ±2^53"}, ""},
		{c("id 2^64", call("18446744073709551616"), false), -32600, []string{"20 digits"}, ""},
		{c("id null", call("null"), false), -32600, []string{"null"}, ""},
		{c("id true", call("true"), false), -32600, []string{"boolean"}, ""},
		{c("id array", call(`[1]`), false), -32600, []string{"an object or an array"}, ""},
		{c("id 2^53", call("9007199254740992"), false), 0, []string{"9007199254740992"}, ""},
		{c("id -2^53", call("-9007199254740992"), false), 0, []string{"-9007199254740992"}, ""},
		{c("id 15 digits", call("-999999999999999"), true), 0, []string{"-999999999999999"}, ""},
		{c("id string 1.5", call(`"1.5"`), true), 0, []string{`"1.5"`}, ""},
		{c("id string empty", call(`""`), true), 0, []string{`""`}, ""},
		{c("id string NUL and escapes", call(`"\u0000\"\\\/\b\f\n\r\t"`), true), 0, []string{`"\u0000\"\\/\b\f\n\r\t"`}, ""},
		{c("id string astral", call(`"\ud83d\udca5💥"`), true), 0, []string{`"💥💥"`}, ""},
		{c("id string big number", call(`"123456789012345678901234567890"`), true), 0, []string{`"123456789012345678901234567890"`}, ""},
		{c("id string unpaired surrogate", call(`"\ud800"`), false), -32700, []string{"surrogate"}, ""},
		// D3: exactly one JSON value.
		{c("trailing xyz", call("1")+" xyz", false), -32700, []string{"data after the JSON-RPC message"}, ""},
		{c("two objects", call("1")+call("2"), false), -32700, []string{"data after"}, ""},
		{c("two objects with a newline", call("1")+"\n"+call("2"), false), -32700, []string{"data after"}, ""},
		{c("trailing bracket", call("1")+"]", false), -32700, []string{"data after"}, ""},
		{c("trailing NUL", call("1")+"\x00", false), -32700, []string{"data after"}, ""},
		{b("batch then object", batch("1")+call("2")), -32700, []string{"data after"}, ""},
		{c("trailing whitespace", call("1")+" \r\n\t ", true), 0, []string{"1"}, ""},
		{c("bad id then trailing data", call("1.5")+"x", false), -32700, []string{"data after"}, ""},
		{c("truncated", call("1")[:40], false), -32700, []string{"truncated"}, ""},
		// D4: a member name twice, anywhere in a message.
		{c("two methods", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{`"method" twice`, "at /)"}, "1"},
		{c("two ids", `{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{`"id" twice`}, ""},
		{c("two jsonrpc", `{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{`"jsonrpc" twice`}, "1"},
		{c("two params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"},"params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{`"params" twice`}, "1"},
		{c("two tool names", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{`"name" twice`, "at /params)"}, "1"},
		{c("two arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1","item_id":"2"}}}`, false), -32600, []string{`"item_id" twice`, "at /params/arguments)"}, "1"},
		{c("two _meta keys", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"io.github.caddy-rcns/idempotency-key":"a","io.github.caddy-rcns/idempotency-key":"b"}}}`, false), -32600, []string{"twice", "at /params/_meta)"}, "1"},
		{c("escaped duplicate", `{"jsonrpc":"2.0","id":1,"method":"tools/call","\u006d\u0065thod":"tools/list","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{`"method" twice`}, "1"},
		{b("batch member twice", "["+call("1")+`,{"jsonrpc":"2.0","id":2,"id":3,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}]`), -32600, []string{`"id" twice`, "at /1)"}, ""},
		{c("duplicate then trailing data", `{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call"} x`, false), -32700, []string{"data after"}, ""},
		// Messages that are no JSON-RPC message at all.
		{c("a number", `1`, false), -32600, []string{"not a JSON object"}, ""},
		{b("empty batch", `[]`), -32600, []string{"empty"}, ""},
		{b("batch of a number", `[1]`), -32600, []string{"message 0 of the batch is not a JSON object"}, ""},
		// D5: JSON-RPC 2.0's own members (helper-94: the SDK answered
		// these in plain text, or 202 with no answer at all).
		{c("jsonrpc 1.0", strings.Replace(call("1"), `"2.0"`, `"1.0"`, 1), false), -32600, []string{`"jsonrpc": "1.0"`, `"jsonrpc": "2.0"`}, "1"},
		{c("jsonrpc a number", strings.Replace(call("1"), `"2.0"`, `2.0`, 1), false), -32600, []string{`"jsonrpc": 2.0`}, "1"},
		{c("no jsonrpc", `{"id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{`no "jsonrpc": "2.0" member`}, "1"},
		{c("jsonrpc escaped", strings.Replace(call("1"), `"2.0"`, `"2\u002e0"`, 1), true), 0, []string{"1"}, ""},
		{c("method a number", `{"jsonrpc":"2.0","id":1,"method":5}`, false), -32600, []string{"a method that is not a string (5)"}, "1"},
		{c("no method, result or error", `{"jsonrpc":"2.0","id":1}`, false), -32600, []string{"no method", "no result or error"}, ""},
		{c("tools/call without params", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, false), -32600, []string{"tools/call without params"}, "1"},
		{b("batch with a jsonrpc 1.0 message", "["+call("1")+`,{"jsonrpc":"1.0","id":2,"method":"ping"}]`), -32600, []string{"message 1 of the batch", `"jsonrpc": "1.0"`}, ""},
		// helper-97: what still reached the SDK.
		{c("tools/call params null", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`, false), -32600, []string{`calls tools/call without params (or with "params": null)`}, "1"},
		{c("initialize without params", `{"jsonrpc":"2.0","id":1,"method":"initialize"}`, false), -32600, []string{"calls initialize without params", "protocolVersion"}, "1"},
		{c("initialize params null", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":null}`, false), -32600, []string{"calls initialize without params"}, "1"},
		{c("resources/read without params", `{"jsonrpc":"2.0","id":1,"method":"resources/read"}`, false), -32600, []string{"calls resources/read without params"}, "1"},
		{c("method and result", strings.Replace(call("1"), `"method"`, `"result":{},"method"`, 1), false), -32600, []string{"both a method", "and a result or error"}, ""},
		{c("ping and result", `{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`, false), -32600, []string{"both a method"}, ""},
		{c("result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`, false), -32600, []string{"both a result and an error"}, ""},
		{c("response without an id", `{"jsonrpc":"2.0","result":{}}`, false), -32600, []string{"a response without an id"}, ""},
		{c("error a string", `{"jsonrpc":"2.0","id":1,"error":"bad"}`, false), -32600, []string{"an error that is not an object"}, ""},
		{c("notification with an id", `{"jsonrpc":"2.0","id":25,"method":"notifications/initialized"}`, false), -32600, []string{"a notification with an id"}, "25"},
		{c("tools/call params an array", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[{"name":"fetch_item"}]}`, false), -32600, []string{"has params that are an array, not an object", `send "params": {`}, "1"},
		{c("tools/list params a string", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":"x"}`, false), -32600, []string{"params that are a string"}, "1"},
		{c("initialize params an array", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":[]}`, false), -32600, []string{"params that are an array"}, "1"},
		{c("notification params a number", `{"jsonrpc":"2.0","method":"notifications/initialized","params":1}`, false), -32600, []string{"params that are a number"}, ""},
		{c("tools/list params empty object", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, false), 0, []string{"1"}, ""},
		{c("tools/call without an id", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, false), -32600, []string{"a request without an id"}, ""},
	}
}

// TestMCPEnvelopeRules holds the door to JSON-RPC's and MCP's envelope
// rules where the go-sdk reads loosely (envelope.go): a batch whose calls
// share an id (the SDK kept one of them and never answered it), an id
// it cannot echo exactly (1.5 answered as 1, 2^64 as -2^63, null or an
// object refused in plain text), data after the message (ignored), and
// a member name twice (the last won). Each refusal is JSON-RPC -32700
// or -32600 at HTTP 400 (with the request's id when it could be read,
// else id null; TestMCPEnvelopeFaultIDs), and runs nothing (the upstream is
// not called); every case gets the same answer with and without the
// fast path. The cases beside them (ids 1 and "1", ±2^53, unusual
// strings, trailing whitespace) are served, each call answered with its
// own id.
func TestMCPEnvelopeRules(t *testing.T) {
	dd := newDiffDoors(t)
	for _, c := range envelopeCases() {
		t.Run(c.name, func(t *testing.T) {
			before := dd.hits.Load()
			w := dd.serve(t, c.fastCase)
			ran := dd.hits.Load() != before
			if c.code != 0 {
				var ans struct {
					JSONRPC string          `json:"jsonrpc"`
					ID      json.RawMessage `json:"id"`
					Error   rpcError        `json:"error"`
				}
				if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/json" || json.Unmarshal(w.Body.Bytes(), &ans) != nil {
					t.Fatalf("answered %d %q %s, want a JSON-RPC error at 400", w.Code, w.Header().Get("Content-Type"), w.Body)
				}
				wantID := cmp.Or(c.id, "null")
				if ans.JSONRPC != "2.0" || string(ans.ID) != wantID || ans.Error.Code != c.code {
					t.Errorf("answered %s, want code %d with id %s", w.Body, c.code, wantID)
				}
				for _, s := range c.want {
					if !strings.Contains(ans.Error.Message, s) {
						t.Errorf("message %q does not say %q", ans.Error.Message, s)
					}
				}
				if ran {
					t.Error("a refused message ran a call")
				}
				return
			}
			if w.Code != http.StatusOK {
				t.Fatalf("answered %d %s, want 200", w.Code, w.Body)
			}
			var answers []struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			body := w.Body.Bytes()
			if !strings.HasPrefix(c.body, "[") {
				body = append(append([]byte("["), body...), ']')
			}
			if err := json.Unmarshal(body, &answers); err != nil || len(answers) != len(c.want) {
				t.Fatalf("answered %s, want %d answers", w.Body, len(c.want))
			}
			for _, a := range answers { // the SDK writes a batch's answers as the calls end
				found := false
				for _, id := range c.want {
					found = found || sameID(a.ID, []byte(id))
				}
				if !found || len(a.Result) == 0 {
					t.Errorf("answer %s %s: want a result for one of the ids %v", a.ID, a.Result, c.want)
				}
			}
		})
	}
}

// TestMCPEnvelopeFaultIDs: an envelope refusal of one request whose id
// could be read answers that id, wherever the id stands among the
// members (after params too), at every protocol version the door
// speaks (JSON-RPC 2.0 §5: id null only when it cannot be determined);
// a parse error, a batch, a response, no id, two ids and an id the door
// cannot echo exactly are answered with id null. Under 2026-07-28 the
// door answers these too, before the SDK reads the message.
func TestMCPEnvelopeFaultIDs(t *testing.T) {
	dd := newDiffDoors(t)
	cases := []struct {
		name, body string
		code       int
		id         string // the answer's id, as JSON
		batchOnly  bool   // a batch: sent under 2025-03-26 only
	}{
		{"params an array", `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[1]}`, -32600, "7", false},
		{"params a string", `{"jsonrpc":"2.0","id":"s","method":"tools/list","params":"x"}`, -32600, `"s"`, false},
		{"params a number, id last", `{"jsonrpc":"2.0","method":"tools/call","params":1,"id":8}`, -32600, "8", false},
		{"params an array, string id last", `{"jsonrpc":"2.0","method":"tools/list","params":[1],"id":"after"}`, -32600, `"after"`, false},
		{"params true, escaped id name", `{"jsonrpc":"2.0","method":"tools/list","params":true,"\u0069d":9}`, -32600, "9", false},
		{"params false, escaped string id", `{"jsonrpc":"2.0","method":"tools/list","params":false,"id":"\u0061"}`, -32600, `"a"`, false},
		{"no params, id last", `{"jsonrpc":"2.0","method":"tools/call","id":10}`, -32600, "10", false},
		{"jsonrpc 1.0, id last", `{"jsonrpc":"1.0","method":"tools/list","id":11}`, -32600, "11", false},
		{"method a number, id last", `{"jsonrpc":"2.0","method":5,"id":12}`, -32600, "12", false},
		{"notification with an id", `{"jsonrpc":"2.0","method":"notifications/initialized","id":13}`, -32600, "13", false},
		{"a name twice in params, id last", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a","name":"b"},"id":14}`, -32600, "14", false},
		{"id 2^53, params an array", `{"jsonrpc":"2.0","method":"tools/list","params":[],"id":-9007199254740992}`, -32600, "-9007199254740992", false},
		// id null: it cannot be determined, or is not a request's.
		{"two ids", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1],"id":2}`, -32600, "null", false},
		{"id 1.5, params an array", `{"jsonrpc":"2.0","method":"tools/list","params":[1],"id":1.5}`, -32600, "null", false},
		{"id null, params an array", `{"jsonrpc":"2.0","method":"tools/list","params":[1],"id":null}`, -32600, "null", false},
		{"no id, params an array", `{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}`, -32600, "null", false},
		{"a response", `{"jsonrpc":"2.0","id":3,"error":"bad"}`, -32600, "null", false},
		{"method and result", `{"jsonrpc":"2.0","id":3,"method":"ping","result":{}}`, -32600, "null", false},
		{"neither", `{"jsonrpc":"2.0","id":3}`, -32600, "null", false},
		{"parse error", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":[1]`, -32700, "null", false},
		{"data after", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":[1]} x`, -32700, "null", false},
		{"batch", `[{"jsonrpc":"2.0","id":4,"method":"tools/list","params":[1]}]`, -32600, "null", true},
	}
	versions := append([]string{""}, sdkVersions...)
	for _, v := range versions {
		for _, c := range cases {
			if c.batchOnly && v != "2025-03-26" {
				continue
			}
			t.Run(cmp.Or(v, "none")+"/"+c.name, func(t *testing.T) {
				fc := fastCase{name: c.name, body: c.body}
				if v != "" {
					fc.hdr = map[string][]string{"Mcp-Protocol-Version": {v}}
				}
				before := dd.hits.Load()
				w := dd.serve(t, fc)
				var ans struct {
					ID    json.RawMessage `json:"id"`
					Error rpcError        `json:"error"`
				}
				if w.Code != http.StatusBadRequest || json.Unmarshal(w.Body.Bytes(), &ans) != nil {
					t.Fatalf("answered %d %s, want a JSON-RPC error at 400", w.Code, w.Body)
				}
				if string(ans.ID) != c.id || ans.Error.Code != c.code {
					t.Errorf("answered %s, want code %d with id %s", w.Body, c.code, c.id)
				}
				if dd.hits.Load() != before {
					t.Error("a refused message ran a call")
				}
			})
		}
	}
}

// sameID reports whether the answer's id got is the id want: the same
// string, or the same number literal (byte for byte).
func sameID(got, want []byte) bool {
	var g, w string
	if json.Unmarshal(got, &g) == nil && json.Unmarshal(want, &w) == nil {
		return g == w
	}
	return string(got) == string(want)
}

// TestMCPHeaderAndInitializeRules: a POST's singleton fields the SDK
// read loosely (the first of two MCP-Protocol-Version or Content-Type
// values won; a JSON Content-Type naming another charset was read as
// UTF-8) are refused in the SDK's own plain-text form (400 for the
// version, 415 for the media type), and an initialize whose params the
// SDK cannot decode (protocolVersion a number) is -32602 invalid params
// with the call's id, not the SDK's code 0. Each case gets one answer
// with and without the fast path, and nothing runs.
func TestMCPHeaderAndInitializeRules(t *testing.T) {
	dd := newDiffDoors(t)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`
	init := func(id, params string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"initialize","params":` + params + `}`
	}
	h := func(k string, vals ...string) map[string][]string { return map[string][]string{k: vals} }
	for _, c := range []struct {
		fastCase
		status int
		want   string // words of the answer's body
	}{
		{fastCase{name: "version twice", body: call, hdr: h("Mcp-Protocol-Version", "2025-11-25", "2025-06-18")}, 400, "MCP-Protocol-Version appears 2 times"},
		{fastCase{name: "version twice, one value", body: call, hdr: h("Mcp-Protocol-Version", "2025-11-25", "2025-11-25")}, 400, "appears 2 times"},
		{fastCase{name: "charset latin1", body: call, hdr: h("Content-Type", "application/json; charset=latin1")}, 415, `charset "latin1" is not accepted`},
		{fastCase{name: "charset utf-16", body: call, hdr: h("Content-Type", "application/json;charset=\"UTF-16\"")}, 415, `charset "UTF-16"`},
		{fastCase{name: "Content-Type twice", body: call, hdr: h("Content-Type", "application/json", "application/json")}, 415, "Content-Type appears 2 times"},
		{fastCase{name: "charset UTF-8", body: call, hdr: h("Content-Type", "application/json; charset=UTF-8")}, 200, `"outcome":"succeeded"`},
		{fastCase{name: "initialize protocolVersion a number", body: init("1", `{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)}, 200, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,`},
		{fastCase{name: "initialize clientInfo a string", body: init(`"i"`, `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":"t"}`)}, 200, `{"jsonrpc":"2.0","id":"i","error":{"code":-32602,`},
		{fastCase{name: "initialize", body: init("1", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)}, 200, `"protocolVersion":"2025-11-25"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := dd.hits.Load()
			w := dd.serve(t, c.fastCase)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
				t.Errorf("answered %d %s, want %d saying %s", w.Code, w.Body, c.status, c.want)
			}
			if ran := dd.hits.Load() != before; ran != (c.status == 200 && strings.Contains(c.body, "tools/call")) {
				t.Errorf("the call ran: %v", ran)
			}
		})
	}
}

// TestTransportRulesFirst: a message sent with a transport the go-sdk
// refuses (HTTP method, MCP-Protocol-Version, Content-Type, Accept)
// gets the SDK's own refusal (or the door's, for a header field sent
// twice or a charset other than UTF-8), byte for byte the one a sound
// tools/list gets, whatever the message: a tasks method (the door's, once answered
// before the SDK read the request: 200 for a text/plain body or an
// unsupported version), or one the door's envelope rules,
// paramsFault, depth or batch limits refuse (once -32600, 400
// invalid-json or batch-too-large where the SDK says 415). A
// transport the SDK accepts leaves each to its own answer. The table's
// statuses are the SDK's (v1.8.0).
func TestTransportRulesFirst(t *testing.T) {
	e := testEngine(t)
	d := newTestDoor(t, e, nil)
	toolsList := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	const unbatched = "JSON-RPC batching is not supported" // the SDK's 400 for a batch from 2025-06-18 on
	bodies := []struct {
		name, body string
		status     int    // the answer when the SDK reads the request
		want       string // in its body
		batch      bool   // a batch: under a revision without batches the SDK's 400 unbatched instead
	}{
		{"tasks/get", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}}}`, 200, `"code":-32602`, false},
		{"parse error", `{"jsonrpc":`, 400, `"code":-32700`, false},
		{"empty batch", `[]`, 400, `"code":-32600`, false},
		{"tools/call params null", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`, 400, `"code":-32600`, false},
		{"member twice", `{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}`, 400, `"code":-32600`, false},
		{"initialize bad params", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5}}`, 200, `"code":-32602`, false},
		{"too deep", strings.Repeat("[", MaxMCPJSONDepth+1) + strings.Repeat("]", MaxMCPJSONDepth+1), 400, `"reason":"invalid-json"`, false},
		{"batch too large", "[" + strings.TrimSuffix(strings.Repeat(`{"jsonrpc":"2.0","id":1,"method":"tools/list"},`, DefaultMCPMaxBatch+1), ",") + "]", 400, `"reason":"batch-too-large"`, true},
		{"batch member twice", `[{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}]`, 400, `"code":-32600`, true},
	}
	h := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = append(m[kv[i]], kv[i+1])
		}
		return m
	}
	for _, c := range []struct {
		name   string
		method string
		hdr    map[string][]string
		status int // the SDK's answer to tools/list so sent
		// batches: the revision sent has batches (2025-03-26, or no
		// MCP-Protocol-Version); diffBase's 2025-11-25 has none.
		batches bool
	}{
		{name: "as the base", status: 200},
		{name: "Content-Type text/plain", hdr: h("Content-Type", "text/plain"), status: 415},
		{name: "no Content-Type", hdr: h("Content-Type", ""), status: 415},
		{name: "Content-Type malformed", hdr: h("Content-Type", "application/json; charset"), status: 415},
		{name: "Content-Type with charset", hdr: h("Content-Type", "application/json; charset=utf-8"), status: 200},
		{name: "Content-Type upper case", hdr: h("Content-Type", "Application/JSON"), status: 200},
		{name: "no Accept", hdr: h("Accept", ""), status: 400},
		{name: "Accept json only", hdr: h("Accept", "application/json"), status: 400},
		{name: "Accept stream only", hdr: h("Accept", "text/event-stream"), status: 400},
		{name: "Accept in two fields", hdr: h("Accept", "application/json", "Accept", "text/event-stream;q=0.5"), status: 200},
		{name: "Accept */*", hdr: h("Accept", "*/*"), status: 200},
		{name: "Accept wildcards", hdr: h("Accept", "application/*, TEXT/*"), status: 200},
		{name: "version 2024-10-01", hdr: h("Mcp-Protocol-Version", "2024-10-01"), status: 400},
		{name: "no version", hdr: h("Mcp-Protocol-Version", ""), status: 200, batches: true},
		{name: "version 2025-03-26", hdr: h("Mcp-Protocol-Version", "2025-03-26"), status: 200, batches: true},
		{name: "version 2025-06-18", hdr: h("Mcp-Protocol-Version", "2025-06-18"), status: 200},
		{name: "charset latin1", hdr: h("Content-Type", "application/json; charset=latin1"), status: 415}, // the door's own header rules (headerFault)
		{name: "Content-Type twice", hdr: h("Content-Type", "application/json", "Content-Type", "application/json"), status: 415},
		{name: "version twice", hdr: h("Mcp-Protocol-Version", "2025-03-26", "Mcp-Protocol-Version", "2025-03-26"), status: 400},
		{name: "GET", method: http.MethodGet, status: 405},
		{name: "PUT", method: http.MethodPut, status: 405},
		{name: "DELETE", method: http.MethodDelete, status: 405},
	} {
		t.Run(c.name, func(t *testing.T) {
			sdk := serveCase(d, fastCase{method: c.method, body: toolsList, hdr: c.hdr})
			if sdk.Code != c.status {
				t.Fatalf("the SDK answered tools/list %d (%s), the table says %d: the SDK's transport rules changed; update sdkTransportOK and this table", sdk.Code, sdk.Body, c.status)
			}
			for _, b := range bodies {
				got := serveCase(d, fastCase{method: c.method, body: b.body, hdr: c.hdr})
				if c.status != http.StatusOK {
					t.Run(b.name, func(t *testing.T) { sameAnswer(t, got, sdk) })
					continue
				}
				status, want := b.status, b.want
				if b.batch && !c.batches {
					status, want = http.StatusBadRequest, unbatched
				}
				if got.Code != status || !strings.Contains(got.Body.String(), want) {
					t.Errorf("%s: %d %s, want %d and %s", b.name, got.Code, got.Body, status, want)
				}
			}
		})
	}
}

// TestBatchRefusedAsSDK: a batch under a revision without batches gets
// the go-sdk's own refusal, byte for byte (status, header fields, body)
// what the SDK's handler answers the same request, without the SDK
// reading it: a batch whose second member is not a message, which the
// SDK would call a malformed payload once it had decoded it, gets the
// same refusal as a sound one. An array that is not one whole JSON
// value (truncated, malformed inside, data after it) is the envelope
// rules' -32700, as under every revision.
func TestBatchRefusedAsSDK(t *testing.T) {
	d := newTestDoor(t, testEngine(t), nil)
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for _, version := range []string{"2025-06-18", "2025-11-25", "2099-01-01"} {
		hdr := map[string][]string{"Mcp-Protocol-Version": {version}}
		sound := "[" + list + "]"
		got := serveCase(d, fastCase{body: sound, hdr: hdr})
		want := serveSDK(t, d, fastCase{body: sound, hdr: hdr})
		if want.Code != http.StatusBadRequest || !strings.Contains(want.Body.String(), "batching is not supported") {
			t.Fatalf("%s: the SDK answered a batch %d %s: its rule changed; update sdkBatches", version, want.Code, want.Body)
		}
		if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") ||
			got.Header().Get("X-Content-Type-Options") != want.Header().Get("X-Content-Type-Options") {
			t.Errorf("%s: the door answered %d %v %q, the SDK %d %v %q", version, got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
		unread := serveCase(d, fastCase{body: "[" + list + `, 1, {"a":` + strings.Repeat("[", 10) + strings.Repeat("]", 10) + "}]", hdr: hdr})
		if unread.Code != want.Code || unread.Body.String() != want.Body.String() {
			t.Errorf("%s: a batch with members that are not messages: %d %q, want the SDK's %q unread", version, unread.Code, unread.Body, want.Body)
		}
		for _, broken := range []string{"[" + list + ",", "[" + list + `, {"a":}]`, "[" + list + "] x", "[" + list + "] {}",
			"[" + list + `, {"x":"` + "\xff" + `"}]`, "[" + list + `, {"x":"\ud800"}]`} {
			if got := serveCase(d, fastCase{body: broken, hdr: hdr}); got.Code != http.StatusBadRequest || !strings.Contains(got.Body.String(), `"code":-32700`) {
				t.Errorf("%s: %q: %d %s, want the envelope rules' -32700", version, broken, got.Code, got.Body)
			}
		}
	}
}

// TestStandardHeaderFieldsOnce: from MCP 2026-07-28 on, a tools/call
// sending Mcp-Method, Mcp-Name or an Mcp-Param-* field more than once
// is refused (400) before anything runs, as a repeated
// MCP-Protocol-Version is: the SDK reads the first value, a proxy may
// read the last. Before 2026-07-28 the SDK reads none of them, and the
// door leaves them alone.
func TestStandardHeaderFieldsOnce(t *testing.T) {
	dd := newDiffDoors(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	base := map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"fetch_item"}}
	for _, c := range []struct{ field, second string }{
		{"Mcp-Name", "fetch_other"}, {"Mcp-Name", "fetch_item"}, {"Mcp-Method", "tools/list"}, {"Mcp-Param-Item", "1"},
	} {
		hdr := map[string][]string{}
		for k, v := range base {
			hdr[k] = v
		}
		first := "1"
		if v, ok := base[c.field]; ok {
			first = v[0]
		}
		hdr[c.field] = []string{first, c.second}
		before := dd.hits.Load()
		for _, d := range []*Door{dd.fast, dd.sdk} {
			w := serveCase(d, fastCase{body: body, hdr: hdr})
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.field+" appears 2 times") {
				t.Errorf("%s sent twice: %d %s, want 400 naming it", c.field, w.Code, w.Body)
			}
		}
		if dd.hits.Load() != before {
			t.Errorf("%s sent twice: the upstream was called", c.field)
		}
	}
	old := map[string][]string{"Mcp-Protocol-Version": {"2025-11-25"}, "Mcp-Name": {"fetch_item", "fetch_other"}}
	if w := serveCase(dd.fast, fastCase{body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}}`, hdr: old}); w.Code != http.StatusOK {
		t.Errorf("2025-11-25 with Mcp-Name twice: %d %s, want the call answered (the SDK reads no Mcp-Name then)", w.Code, w.Body)
	}
}

// TestMCPParamsFault: a call whose params the SDK cannot decode into
// its types (a member of the wrong JSON type, at any depth) is -32602
// invalid params with the call's id, as the SDK itself answers it (each
// case is sent to the SDK's own handler too, which refuses it -32602),
// but naming the member's path in params and both JSON types, not the
// SDK's Go types; nothing runs, and each case gets one answer with and
// without the fast path.
func TestMCPParamsFault(t *testing.T) {
	dd := newDiffDoors(t)
	msg := func(id, method, params string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":` + params + `}`
	}
	for _, c := range []struct {
		name, body string
		id         string // the answer's id, as JSON
		want       string // the refusal's words after "invalid params: "
	}{
		{"tools/call name a number", msg("1", "tools/call", `{"name":5,"arguments":{"item_id":"1"}}`), "1", "tools/call: params.name must be a string, not a number"},
		{"tools/call name an object", msg(`"a"`, "tools/call", `{"name":{"x":[1]},"arguments":{}}`), `"a"`, "tools/call: params.name must be a string, not an object"},
		{"tools/call _meta a number", msg("2", "tools/call", `{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":5}`), "2", "tools/call: params._meta must be an object, not a number"},
		{"tools/call _meta an array", msg("3", "tools/call", `{"name":"fetch_item","_meta":[]}`), "3", "tools/call: params._meta must be an object, not an array"},
		{"tools/call without name", msg("13", "tools/call", `{"arguments":{"item_id":"1"}}`), "13", "tools/call: params.name is required: the name of a tool that tools/list lists, a string"},
		{"tools/call name null", msg("14", "tools/call", `{"name":null}`), "14", "tools/call: params.name is required: the name of a tool that tools/list lists, a string"},
		{"tools/call NAME", msg("15", "tools/call", `{"NAME":"fetch_item"}`), "15", "tools/call: params.name is required: the name of a tool that tools/list lists, a string"},
		{"tools/call name empty", msg("16", "tools/call", `{"name":""}`), "16", "tools/call: params.name is required: the name of a tool that tools/list lists, a string"},
		{"tools/list cursor true", msg("4", "tools/list", `{"cursor":true}`), "4", "tools/list: params.cursor must be a string, not true or false"},
		{"ping _meta a string", msg("5", "ping", `{"_meta":"x"}`), "5", "ping: params._meta must be an object, not a string"},
		{"resources/read uri a number", msg("6", "resources/read", `{"uri":-1.5}`), "6", "resources/read: params.uri must be a string, not a number"},
		{"tasks/get _meta a number", msg("7", "tasks/get", `{"taskId":"t","_meta":5}`), "7", "tasks/get: params._meta must be an object, not a number"},
		{"a number out of range", msg("8", "ping", `{"_meta":{"x":1e400}}`), "8", "ping: params._meta.x is a number out of range (beyond about ±1.8e308)"},
		{"an index in the path", msg("9", "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1","icons":[{"src":5}]}}`), "9", "initialize: params.clientInfo.icons[0].src must be a string, not a number"},
		{"initialize clientInfo.name a number", msg("10", "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":5,"version":"1"}}`), "10", "initialize: params.clientInfo.name must be a string, not a number"},
		{"initialize protocolVersion a number", msg("11", "initialize", `{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}`), "11", "initialize: params.protocolVersion must be a string, not a number"},
		{"initialize capabilities.sampling a string", msg("12", "initialize", `{"protocolVersion":"2025-11-25","capabilities":{"sampling":"yes"},"clientInfo":{"name":"t","version":"1"}}`), "12", "initialize: params.capabilities.sampling must be an object, not a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := dd.hits.Load()
			w := dd.serve(t, fastCase{name: c.name, body: c.body})
			var ans struct {
				ID    json.RawMessage `json:"id"`
				Error rpcError        `json:"error"`
			}
			if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &ans) != nil {
				t.Fatalf("answered %d %s, want a JSON-RPC error at 200", w.Code, w.Body)
			}
			if string(ans.ID) != c.id || ans.Error.Code != -32602 || ans.Error.Message != "invalid params: "+c.want {
				t.Errorf("answered %s, want id %s, code -32602, message %q", w.Body, c.id, "invalid params: "+c.want)
			}
			for _, goWords := range []string{"mcp.", "Go ", "interface", "unmarshal"} {
				if strings.Contains(ans.Error.Message, goWords) {
					t.Errorf("message %q names the SDK's Go types (%q)", ans.Error.Message, goWords)
				}
			}
			if dd.hits.Load() != before {
				t.Error("a refused call ran")
			}
			// The SDK's own handler refuses the same message -32602:
			// the door words the SDK's verdict, it adds none.
			raw := serveSDK(t, dd.sdk, fastCase{body: c.body})
			if !strings.Contains(raw.Body.String(), `"code":-32602`) && !(strings.Contains(c.body, `"initialize"`) && strings.Contains(raw.Body.String(), `"code":0`)) {
				t.Errorf("the SDK's own handler answered %d %s, not invalid params", raw.Code, raw.Body)
			}
		})
	}
	// Every method of sdkParams: _meta, which every params type has,
	// sent as a number is refused in the door's words, and by the SDK;
	// a method the door does not serve (undeclared) is -32601 whatever
	// its params hold, sound or not (helper-128: a type fault came
	// first, and the SDK's "method not found" replaced the door's words).
	for method := range sdkParams {
		body := msg("30", method, `{"_meta":5}`)
		w := dd.serve(t, fastCase{name: method, body: body})
		want := `"message":"invalid params: ` + method + `: params._meta must be an object, not a number"`
		if undeclared[method] {
			want = `"code":-32601,"message":"` + undeclaredWords(method) + `"`
			if sound := dd.serve(t, fastCase{name: method, body: msg("31", method, `{}`)}); !strings.Contains(sound.Body.String(), want) {
				t.Errorf("%s with sound params: answered %d %s, want %s", method, sound.Code, sound.Body, want)
			}
			if method == "prompts/list" { // its params are optional
				none := `{"jsonrpc":"2.0","id":32,"method":"prompts/list"}`
				if w := dd.serve(t, fastCase{name: method, body: none}); !strings.Contains(w.Body.String(), want) {
					t.Errorf("%s without params: answered %d %s, want %s", method, w.Code, w.Body, want)
				}
			}
		}
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: answered %d %s, want %s", method, w.Code, w.Body, want)
		}
		if raw := serveSDK(t, dd.sdk, fastCase{body: body}); !strings.Contains(raw.Body.String(), `"code":-32602`) && !strings.Contains(raw.Body.String(), `"code":0`) {
			t.Errorf("%s: the SDK's own handler answered %d %s, not invalid params: is the method still the SDK's, with these params?", method, raw.Code, raw.Body)
		}
	}
	// From 2026-07-28 on the SDK's transport checks come first, and
	// answer at 400: the door leaves the message to it.
	h728 := map[string][]string{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"fetch_item"}}
	for _, body := range []string{
		msg("40", "tools/call", `{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":5}`),
		msg("41", "tools/call", `{"name":5,"arguments":{"item_id":"1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`),
	} {
		c := fastCase{name: body, body: body, hdr: h728}
		w, raw := dd.serve(t, c), serveSDK(t, dd.sdk, c)
		if w.Code != raw.Code || w.Body.String() != raw.Body.String() || w.Code != http.StatusBadRequest {
			t.Errorf("2026-07-28 %s: answered %d %s, the SDK %d %s", body, w.Code, w.Body, raw.Code, raw.Body)
		}
	}
	// Sound params, and a type the SDK takes whatever it holds, are served.
	for _, body := range []string{
		msg("20", "tools/call", `{"name":"fetch_item","arguments":{"item_id":"1"},"_meta":{"progressToken":{"a":1}}}`),
		msg("21", "tools/list", `{"cursor":null}`),
		msg("22", "ping", `{}`),
	} {
		w := dd.serve(t, fastCase{name: body, body: body})
		var ans struct {
			Result json.RawMessage `json:"result"`
			Error  *rpcError       `json:"error"`
		}
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &ans) != nil || ans.Error != nil || len(ans.Result) == 0 {
			t.Errorf("%s: answered %d %.300s, want a result", body, w.Code, w.Body)
		}
	}
}

// serveSDK is the answer of d's SDK handler itself to c (POST, diffBase
// and c's header fields), the door's own steps skipped: what the SDK
// alone says of a message.
func serveSDK(t *testing.T, d *Door, c fastCase) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, DefaultMCPPath, strings.NewReader(c.body))
	for k, v := range diffBase {
		r.Header[k] = v
	}
	for k, v := range c.hdr {
		r.Header[http.CanonicalHeaderKey(k)] = v
	}
	rq, e := d.identify(r, []byte(c.body), true)
	if e != nil {
		t.Fatal(e)
	}
	w := httptest.NewRecorder()
	d.sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), mcpRequestKey{}, rq)))
	return w
}
