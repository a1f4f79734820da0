package integration

import (
	"strings"
	"testing"
)

// TestBuiltinQueryParameters: a built-in reads its string parameters
// from the query as from the body (agent-guide.md "Inputs"), over the
// door under test: INSPECT /?target=audit&audit_id=… answered "needs
// audit_id" although one was sent, and a malformed one in the query
// was never looked at.
func TestBuiltinQueryParameters(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	g := w.GW
	f := g.Do(t, "FETCH", "/guests/g-1", hdr(agentA1, "hotel:read"), nil)
	wantStatus(t, f, 200)
	id := f.Header.Get("Audit-ID")
	if len(id) != 64 {
		t.Fatalf("FETCH Audit-ID %q", id)
	}
	r := g.Do(t, "INSPECT", "/?target=audit&audit_id="+id, hdr(agentA1, ""), nil)
	wantStatus(t, r, 200)
	if !strings.Contains(string(r.Body), id) {
		t.Errorf("INSPECT target=audit by query does not return the record of %s:\n%s", id, r)
	}
	bad := g.Do(t, "INSPECT", "/?target=audit&audit_id=nope", hdr(agentA1, ""), nil)
	wantStatus(t, bad, 400)
	if o := bad.Object(t); str(o, "reason") != "invalid-parameter" || !strings.Contains(str(o, "explanation"), "audit_id must be an Audit-ID") {
		t.Errorf("a malformed query audit_id: %s", bad)
	}
}
