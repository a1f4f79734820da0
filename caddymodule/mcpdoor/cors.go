package mcpdoor

import (
	"net/http"
	"strings"
)

// corsExposed are the response fields a browser-based MCP client may
// read from an answer of the MCP path (Access-Control-Expose-Headers):
// the AGTP response fields an agent acts on, and MCP's own.
const corsExposed = "Agent-ID, AGTP-API-Version, Attribution-Record, Audit-ID, Contract-Synthesized, Idempotent-Replayed, " +
	"Mcp-Session-Id, Owner-ID, RateLimit, RateLimit-Policy, RCNS-Attempt-Id, Request-ID, Response-ID, Retry-After, Server-ID, " +
	"Task-ID, Trust-Tier, Verification-Path, WWW-Authenticate"

// corsMaxAge is how long a browser may keep a preflight's answer
// (Access-Control-Max-Age, seconds).
const corsMaxAge = "600"

// allowCORS answers the Fetch standard's CORS for origin, an Origin the
// door allows (originAllowed: its own, or one of allowed_origins), so
// that a browser-based MCP client (the Inspector's direct mode, a web
// app) can send its requests and read the answers: a preflight (OPTIONS
// with Access-Control-Request-Method) is answered 204 here, allowing
// the methods of Streamable HTTP and the fields it asked for, and
// reports true; any other request gets Access-Control-Allow-Origin and
// the exposed fields on whatever answer follows (a refusal included,
// so a 401's challenge is readable), and reports false. The answer
// varies by Origin. Credentials (cookies) are never allowed: an agent
// identifies itself with fields, not cookies.
func allowCORS(w http.ResponseWriter, r *http.Request, origin string) bool {
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Add("Vary", "Origin")
	// GET and DELETE are allowed cross-origin although the stateless
	// door answers them 405: a client that opens the SSE stream or ends
	// its session then reads that 405 (the TypeScript SDK handles it)
	// instead of failing on an opaque CORS error.
	if preflight(w, r, "POST, GET, DELETE", strings.Join(r.Header.Values("Access-Control-Request-Headers"), ", "), corsMaxAge) {
		return true
	}
	hd.Set("Access-Control-Expose-Headers", corsExposed)
	return false
}

// preflight answers r when it is a CORS preflight (OPTIONS with
// Access-Control-Request-Method): 204 allowing methods and the request
// fields headers ("" for none) for maxAge seconds, and reports true;
// any other request it leaves alone (false). The caller has set
// Access-Control-Allow-Origin.
func preflight(w http.ResponseWriter, r *http.Request, methods, headers, maxAge string) bool {
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	hd := w.Header()
	hd.Set("Access-Control-Allow-Methods", methods)
	if headers != "" {
		hd.Set("Access-Control-Allow-Headers", headers)
	}
	hd.Set("Access-Control-Max-Age", maxAge)
	w.WriteHeader(http.StatusNoContent)
	return true
}
