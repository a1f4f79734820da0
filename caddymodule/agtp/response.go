package agtp

// Field is one response header field in its AGTP spelling ("Agent-ID",
// not Go's "Agent-Id").
type Field struct {
	Name, Value string
}

// Response is one AGTP answer as the engine returns it; each door only
// frames it (spec §2.1 status line, §2.3 HTTP carriage).
type Response struct {
	// Status is the AGTP status code.
	Status int
	// Header holds the response fields in the order written, each name
	// once, Content-Length last.
	Header []Field
	// Body is the encoded body (nil for none).
	Body []byte
	// Close: the request's declared body was not read to its end (a
	// refusal came first), so the connection cannot carry another
	// request; the door closes it after this answer.
	Close bool
	// RequestID is the request's id: its Request-ID when well formed,
	// else the one the gateway minted (the Attribution-Record's
	// request_id). It is for the doors' access log lines, which carry
	// it as request_id, as every engine log line about the request
	// does; it is not a response field (Header echoes only a sent one).
	RequestID string
	// Reason is the reason token of a refusal (spec §19), "" for an
	// answer that is not one; for the doors' access log lines.
	Reason string
}

// Get returns the value of the response field name (exact AGTP
// spelling, case-insensitively), "" when absent.
func (r *Response) Get(name string) string {
	for _, f := range r.Header {
		if equalFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// equalFold is strings.EqualFold for ASCII header names.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
