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
