package integration

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

// TestContentEncodingRefused: an AGTP body sent compressed is 415
// unsupported-content-encoding naming the coding, with
// Accept-Encoding: identity (RFC 9110 §15.5.16, §12.5.3), before any
// upstream call; it was 400 invalid-json "syntax error at byte 0".
func TestContentEncodingRefused(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(mustJSON(t, bookBody()))
	_ = zw.Close()
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
	}{
		{"gate", "BOOK", "/room", hdr(agentA1, scopeAll, "Allow-RCNS", "true")},
		{"Tier B", "FETCH", "/guests/g-1", hdr(agentA1, scopeAll)},
		{"anonymous DISCOVER", "DISCOVER", "/", hdr("", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.hdr["Content-Encoding"] = "gzip"
			r := w.GW.Do(t, tc.method, tc.path, tc.hdr, zipped.Bytes())
			b := assertErrorBody(t, r, 415, "unsupported-content-encoding")
			if e := str(b, "explanation"); !strings.Contains(e, `"gzip"`) {
				t.Errorf("explanation %q does not name gzip", e)
			}
			if got := r.Header.Get("Accept-Encoding"); got != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", got)
			}
		})
	}
	if w.Legacy.Count() != 0 || w.Hotel.Count() != 0 {
		t.Errorf("a compressed body reached an upstream (legacy %d, hotel %d)", w.Legacy.Count(), w.Hotel.Count())
	}
	w.assertReservations(t, 0)
}

// TestTaskIDForm: one rule for the Task-ID header and the envelope
// task_id, 1-256 visible ASCII characters; anything else, empty
// included, is 400 invalid-task-id and is not echoed (the header was
// echoed raw with spaces and non-ASCII bytes, the envelope took "a b"
// and dropped ""). A well-formed one is echoed unchanged (§24 item 4).
func TestTaskIDForm(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic", LegacyCounter: true})
	g := w.GW
	for _, v := range []string{"", "a b", "caf\xc3\xa9", strings.Repeat("t", 257)} {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Task-ID", v), nil)
		b := assertErrorBody(t, r, 400, "invalid-task-id")
		if _, echoed := r.Header["Task-Id"]; echoed || b["task_id"] != nil {
			t.Errorf("Task-ID %q echoed: header %q, body task_id %v", v, r.Header.Get("Task-ID"), b["task_id"])
		}
		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), map[string]any{"task_id": v})
		b = assertErrorBody(t, r, 400, "invalid-task-id")
		if _, echoed := r.Header["Task-Id"]; echoed || b["task_id"] != nil {
			t.Errorf("task_id %q echoed: header %q, body task_id %v", v, r.Header.Get("Task-ID"), b["task_id"])
		}
	}
	assertErrorBody(t, g.Do(t, "DISCOVER", "/", hdr("", "", "Task-ID", "a b"), nil), 400, "invalid-task-id")
	if n := w.Hotel.Count(); n != 0 {
		t.Errorf("refused requests made %d hotel calls", n)
	}
	for _, v := range []string{"task-0042", `a"b\c`} {
		r := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read", "Task-ID", v), nil)
		wantStatus(t, r, 200)
		if r.Header.Get("Task-ID") != v || str(r.Object(t), "task_id") != v {
			t.Errorf("Task-ID %q: echoed %q, body task_id %q", v, r.Header.Get("Task-ID"), str(r.Object(t), "task_id"))
		}
		r = g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), map[string]any{"task_id": v})
		wantStatus(t, r, 200)
		if r.Header.Get("Task-ID") != v || str(r.Object(t), "task_id") != v {
			t.Errorf("task_id %q: echoed %q, body task_id %q", v, r.Header.Get("Task-ID"), str(r.Object(t), "task_id"))
		}
	}
}
