package engine

import "testing"

// TestBuiltinQueryParamsRead: every string parameter of a built-in's
// target is read from the query too (builtinQueryParams; action, the
// third one left out, is REVOKE's, for operators). audit_id and key
// were left out, so INSPECT /?target=audit&audit_id=… was
// answered "needs audit_id" although one was sent.
func TestBuiltinQueryParamsRead(t *testing.T) {
	te := newTestEngine(t)
	for _, tc := range []struct {
		target             string
		status             int
		reason, explaining string
	}{
		{"/?target=audit&audit_id=nope", 400, "invalid-parameter", "parameter audit_id must be an Audit-ID"},
		{"/?target=idempotency-key&key=abc", 404, "record-not-found", "no record of this Idempotency-Key"},
	} {
		wantError(t, te.serve(t, "INSPECT", tc.target, agentHeader(), ""), tc.status, tc.reason, tc.explaining)
	}
}
