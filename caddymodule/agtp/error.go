package agtp

import (
	"fmt"

	"github.com/caddy-rcns/caddy-rcns/policy"
)

// Error is the one way a refusal or error reaches the wire, on every
// door: the uniform body of spec §19 (OP-28) plus retryable. The engine
// adds the request's task_id, method and path when it writes the body.
type Error struct {
	// Status is the AGTP status code (400, 262, 464, …).
	Status int
	// Reason is the reason token (spec §19), one of Catalog's or an
	// operator's error_map name.
	Reason string
	// Explanation is one human-readable sentence; the engine cuts it to
	// MaxExplanationBytes.
	Explanation string
	// Retryable: the same request may succeed later unchanged.
	Retryable bool
	// Fields are extra top-level body members ("limit_bytes",
	// "missing_scopes", "error", …).
	Fields map[string]any
	// AttemptID is the RCNS-Attempt-Id of a 464 (spec §11.1, §17.3).
	AttemptID string
}

// Error returns "STATUS reason: explanation".
func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Reason, e.Explanation)
}

// MaxExplanationBytes bounds an error answer's explanation (bytes): the
// net under every refusal that quotes what the caller sent (each quote
// is also cut on its own, textcut.Clip), so no answer echoes a body back.
const MaxExplanationBytes = 2048

// WithFields is New with extra body members.
func (r Reason) WithFields(explanation string, fields map[string]any) *Error {
	e := r.New(explanation)
	e.Fields = fields
	return e
}

// FromRefusal is the wire error of a policy refusal (its own status,
// reason, retryable and fields).
func FromRefusal(r *policy.Refusal) *Error {
	return &Error{Status: r.Status, Reason: r.Reason, Explanation: r.Explanation, Retryable: r.Retryable, Fields: r.Fields}
}
