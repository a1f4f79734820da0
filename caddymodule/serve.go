package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// ianaMethods are the methods of the IANA HTTP Method Registry; without
// Agent-ID they are never AGTP (ARCHITECTURE.md "Which requests are
// AGTP").
var ianaMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "CONNECT": true,
	"OPTIONS": true, "TRACE": true, "PATCH": true, "QUERY": true, "ACL": true,
	"BASELINE-CONTROL": true, "BIND": true, "CHECKIN": true, "CHECKOUT": true, "COPY": true,
	"LABEL": true, "LINK": true, "LOCK": true, "MERGE": true, "MKACTIVITY": true,
	"MKCALENDAR": true, "MKCOL": true, "MKREDIRECTREF": true, "MKWORKSPACE": true, "MOVE": true,
	"ORDERPATCH": true, "PRI": true, "PROPFIND": true, "PROPPATCH": true, "REBIND": true,
	"REPORT": true, "SEARCH": true, "UNBIND": true, "UNCHECKOUT": true, "UNLINK": true,
	"UNLOCK": true, "UPDATE": true, "UPDATEREDIRECTREF": true, "VERSION-CONTROL": true,
}

// isAGTP reports whether r is an AGTP request: it carries Agent-ID, or
// its method is a catalog or custom method outside the IANA registry
// and not a configured passthrough method.
func (h *Handler) isAGTP(r *http.Request) bool {
	if _, ok := r.Header["Agent-Id"]; ok {
		return true
	}
	m := r.Method
	if ianaMethods[m] || h.passthru[m] {
		return false
	}
	return h.methods.IsMethod(m)
}

// ServeHTTP serves AGTP requests in the order of spec §10 and passes
// every other request to next unchanged.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	h.activate()
	if !h.isAGTP(r) {
		return next.ServeHTTP(w, r)
	}
	x := &exchange{h: h, w: w, r: r,
		agentID: headerGet(r, "Agent-ID"),
		taskID:  headerGet(r, "Task-ID"),
	}
	x.agentIDValid = policy.ValidAgentID(x.agentID)
	// Each identifier is checked once, here. A malformed one is refused
	// (checkIdentifiers reads the verdicts) and is never echoed or
	// written into an Attribution-Record: the record names a request id
	// the gateway minted instead, as for a request without one.
	rid, ridSent := headerValue(r, "Request-ID")
	oid, oidSent := headerValue(r, "Owner-ID")
	sid, sidSent := headerValue(r, "Session-ID")
	x.ids = identifiers{requestIDSent: ridSent, ownerIDSent: oidSent,
		badRequestID: ridSent && !ValidRequestID(rid),
		badOwnerID:   oidSent && !policy.ValidOwnerID(oid),
		badSessionID: sidSent && !validSessionID(sid)}
	if ridSent && !x.ids.badRequestID {
		x.requestID, x.requestIDEcho = rid, true
	} else {
		x.requestID = newUUID()
	}
	if oidSent && !x.ids.badOwnerID {
		x.ownerClaim = oid
		if x.agentID == "" {
			// An anonymous request has no registry owner to check the
			// claim against: its record states the owner it claimed,
			// as it states its session.
			x.ownerID = oid
		}
	}
	if sidSent && !x.ids.badSessionID {
		x.sessionID = sid
	}
	// Under identity header the Agent-ID header is the identity, on
	// loopback: a registered one names the Attribution-Record and its
	// chain from the first answer on, refusals before step 6 included
	// (OP-22). In a verified mode it does so only once verified (serve).
	if h.Identity == IdentityHeader {
		x.loopback = localIsLoopback(r) // once: a walk up the request's context chain
		if x.loopback {
			h.setRecordAgent(x)
		}
	}
	if x.sessionID != "" {
		x.sessionFrom = sessionFromHeader
	}
	h.serve(x)
	if !x.written {
		// Every path of serve answers; this is the net under a new one
		// that forgets to, so an AGTP request never gets an empty 200
		// without the AGTP response headers.
		h.logger.Error("no answer written for an AGTP request", zap.String("agent_id", x.agentID),
			zap.String("method", x.method), zap.String("path", x.path))
		x.fail(&wireError{Status: 500, Reason: "internal-error", Explanation: "the gateway reached no answer for this request", Retryable: true})
	}
	m := x.method
	if m == "" {
		m = r.Method
	}
	h.metrics.request(m, x.status)
	return nil
}

// singleValued are the AGTP request headers that must appear at most
// once, in their AGTP spelling.
var singleValued = []string{"Agent-ID", "Owner-ID", "Request-ID", "Task-ID", "Session-ID", "Allow-RCNS",
	"Contract-Synthesized", "Synthesis-Id", "Idempotency-Key", "Negotiation-ID"}

// singleValuedKeys holds singleValued in net/http's canonical form.
var singleValuedKeys = func() map[string]bool {
	m := make(map[string]bool, len(singleValued))
	for _, name := range singleValued {
		m[http.CanonicalHeaderKey(name)] = true
	}
	return m
}()

// request is the parsed AGTP request after framing.
type request struct {
	raw     []byte
	body    map[string]any
	hasBody bool
	caller  *policy.Caller
	idemKey string // parsed Idempotency-Key, "" when absent
}

func (h *Handler) serve(x *exchange) {
	r := x.r
	// The Task-ID header is echoed on every answer, refusals included:
	// checked first, and a malformed one is never echoed.
	if _, ok := r.Header[canonicalKey("Task-ID")]; ok && !validTaskID(x.taskID) {
		x.taskID = ""
		x.fail(errorf(400, "invalid-task-id", "the Task-ID header must be "+taskIDForm))
		return
	}
	// §10 step 1: framing and body limit.
	if strings.Contains(r.RequestURI, "#") {
		x.fail(errorf(400, "invalid-request-line", "the request target must not contain '#' (api-01 §5.6)"))
		return
	}
	if !strings.HasPrefix(r.RequestURI, "/") {
		x.fail(errorf(400, "invalid-request-line", "the request target must be origin-form: an absolute path with an optional query"))
		return
	}
	if len(r.TransferEncoding) > 0 || r.ContentLength < 0 {
		x.fail(errorf(400, "content-length-required", "AGTP messages are framed by Content-Length; chunked or unframed bodies are refused (agtp-09 §6.4.1)"))
		return
	}
	if r.ContentLength > h.MaxRequestBody {
		x.fail(&wireError{Status: 413, Reason: "body-too-large", Explanation: fmt.Sprintf("the request body is %d bytes; the limit is %d bytes", r.ContentLength, h.MaxRequestBody), Fields: map[string]any{"limit_bytes": h.MaxRequestBody}})
		return
	}
	req := &request{}
	if r.ContentLength > 0 {
		if e := checkContentEncoding(r.Header); e != nil {
			x.failWith(e, map[string]string{"Accept-Encoding": "identity"})
			return
		}
		raw, err := recipes.ReadBody(r.Body, r.ContentLength, h.MaxRequestBody)
		if err != nil {
			h.logger.Info("request body read failed", zap.String("agent_id", x.agentID), zap.Int("read_bytes", len(raw)),
				zap.Int64("content_length", r.ContentLength), zap.Error(err))
			x.fail(bodyReadError(err, len(raw), r.ContentLength))
			return
		}
		x.bodyRead = int64(len(raw)) == r.ContentLength
		if x.bodyRead {
			x.rawBody = raw
		}
		if int64(len(raw)) > h.MaxRequestBody {
			x.fail(&wireError{Status: 413, Reason: "body-too-large", Explanation: fmt.Sprintf("the request body exceeds %d bytes", h.MaxRequestBody), Fields: map[string]any{"limit_bytes": h.MaxRequestBody}})
			return
		}
		if e := checkContentType(r.Header["Content-Type"]); e != nil {
			x.fail(e)
			return
		}
		v, e := decodeBody(raw)
		if e != nil {
			x.fail(e)
			return
		}
		obj, ok := v.(map[string]any)
		if !ok {
			x.fail(errorf(400, "invalid-json", "the request body must be a JSON object (the AGTP envelope)"))
			return
		}
		req.raw, req.body, req.hasBody = raw, obj, true
		if bt, ok := obj["task_id"]; ok && bt != nil { // null: not given, like every envelope member
			s, isString := bt.(string)
			if !isString {
				x.fail(errorf(400, "invalid-task-id", "the envelope task_id must be a string, not "+schema.JSONTypeName(bt)))
				return
			}
			if !validTaskID(s) {
				x.fail(errorf(400, "invalid-task-id", "the envelope task_id must be "+taskIDForm))
				return
			}
			switch { // the Task-ID header, when sent, wins (agtp-09 §6.5.4 echoes it; OP-37)
			case x.taskID == "":
				x.taskID = s
			case x.taskID != s:
				h.logger.Info("the Task-ID header and the envelope task_id disagree; the header wins (OP-37)",
					zap.String("agent_id", x.agentID), zap.String("task_id_header", textcut.Clip(x.taskID)), zap.String("task_id_envelope", textcut.Clip(s)))
			}
		}
		if v, ok := obj["session_id"]; ok && v != nil {
			s, e := sessionValue(v, "the envelope session_id")
			if e != nil {
				x.fail(e)
				return
			}
			x.adoptSession(s, sessionFromEnvelope)
		}
	}

	// Single-valued AGTP headers sent twice make the request ambiguous.
	// One pass over the (few) request fields finds whether any is; the
	// refusal names the first in singleValued order.
	for k, v := range r.Header {
		if len(v) > 1 && singleValuedKeys[k] {
			for _, name := range singleValued {
				if len(r.Header[canonicalKey(name)]) > 1 {
					x.fail(errorf(400, "duplicate-header", fmt.Sprintf("the %s header appears more than once; send it once", name)))
					return
				}
			}
		}
	}

	// §10 step 2: method lexical form, legacy opt-in, alias, catalog.
	rm, ref := h.methods.ResolveMethod(r.Method)
	if ref != nil {
		x.fail(fromRefusal(ref))
		return
	}
	x.method = rm.Method
	x.requested = rm.Requested
	if rm.Info != nil && rm.Info.DeprecatedIn != "" {
		x.catalogWrn = catalogWarning(rm.Info)
	}
	if bm, ok := req.body["method"]; ok && bm != nil {
		if s, _ := bm.(string); s != rm.Method && s != r.Method {
			got := schema.JSONTypeName(bm) // "a number", "an object"…
			if s, isStr := bm.(string); isStr {
				got = fmt.Sprintf("%q", textcut.Clip(s))
			}
			x.fail(errorf(400, "method-mismatch", fmt.Sprintf("the envelope method %s differs from the request method %s", got, rm.Method)))
			return
		}
	}
	// The path's characters as sent: url.URL re-escapes a raw one
	// outside the grammar ("{", "|"…) into a valid percent-encoding.
	rawPath, _, _ := strings.Cut(r.RequestURI, "?")
	if ref := policy.CheckPathCharacters(rawPath); ref != nil {
		x.fail(fromRefusal(ref))
		return
	}
	// §10 step 3: redirects, on the normalized path (RFC 3986 §6.2.2:
	// every tier compares the same form).
	path, err := policy.NormalizePath(r.URL.EscapedPath())
	if err != nil {
		x.fail(errorf(400, "invalid-path-encoding", "the request path's percent-encoding is invalid: "+err.Error()))
		return
	}
	if x.query, err = parseQuery(r.URL.RawQuery); err != nil {
		x.fail(errorf(400, "invalid-query", err.Error()))
		return
	}
	x.requestPath = path
	if e := h.dispatchTo(x, path); e != nil {
		x.fail(e)
		return
	}
	// §10 step 6: identity.
	if h.Identity == IdentityHeader && !x.loopback {
		x.fail(errorf(401, "identity-mode-refused", "this gateway trusts the Agent-ID header only on loopback; configure a verified identity mode"))
		return
	}
	if _, ok := r.Header["Agent-Id"]; !ok {
		// The identifiers of an anonymous request are checked as any
		// other's: they are echoed and go into its Attribution-Record.
		if e := h.checkIdentifiers(x, true); e != nil {
			x.fail(e)
			return
		}
		if x.method == "DISCOVER" {
			if !h.anonymousDiscovery() {
				x.fail(&wireError{Status: policy.StatusAuthorizationRequired, Reason: "anonymous-discovery-disabled",
					Explanation: "this server does not answer DISCOVER without an Agent-ID", Fields: map[string]any{"type": "anonymous-discovery-disabled"}})
				return
			}
			if !h.discover(x, req) {
				// Identity (§10 step 6) comes before the match (steps
				// 8–9): without Agent-ID only the manifest and the
				// read-only built-ins are served (spec §8.1).
				x.fail(errorf(401, "agent-unauthenticated", fmt.Sprintf("%s %s needs an Agent-ID header; without one this server answers only DISCOVER / (the manifest) and the built-ins %s",
					x.method, x.path, anonymousBuiltins)))
			}
			return
		}
		x.fail(errorf(401, "agent-unauthenticated", "this request needs an Agent-ID header"))
		return
	}
	if e := h.verifyIdentity(x, req); e != nil {
		h.logger.Info("identity refused", zap.String("agent_id", textcut.Clip(x.agentID)), zap.String("mode", h.Identity), zap.String("reason", e.Reason))
		x.fail(e)
		return
	}
	if x.recordAgent == "" { // not already set from the header (ServeHTTP)
		h.setRecordAgent(x)
	}
	if e := h.checkIdentifiers(x, false); e != nil {
		x.fail(e)
		return
	}
	scopeHdr, scopePresent := headerValue(r, "Authority-Scope")
	caller, ref := policy.ResolveCaller(h.agents, x.agentID, x.ownerClaim, scopeHdr, scopePresent)
	if ref != nil {
		x.fail(fromRefusal(ref))
		return
	}
	req.caller = caller
	x.ownerID = caller.Agent.OwnerID // a claimed Owner-ID equals it (ResolveCaller)
	if v, ok := headerValue(r, "Idempotency-Key"); ok {
		key, err := idempotency.ParseKey(v)
		if err != nil {
			x.fail(errorf(400, "invalid-idempotency-key", "Idempotency-Key must be 1-255 visible ASCII characters, as a token or a quoted string: "+err.Error()))
			return
		}
		req.idemKey = key
	}

	// Tier A built-ins (ignore Contract-Synthesized).
	switch x.method {
	case "DISCOVER":
		if h.discover(x, req) {
			return
		}
	case "PROPOSE", "INSPECT", "REVOKE", "SUSPEND":
		if x.path == "/" {
			h.builtin(x, req)
			return
		}
	}

	// §10 step 7: contract presentation.
	id, presented, e := presentedContract(r)
	if e != nil {
		x.fail(e)
		return
	}
	if presented {
		h.present(x, req, id)
		return
	}
	// §10 step 8: Tier B.
	if ep, params, ok := h.set.Route(x.method, x.path); ok {
		h.invokeEndpoint(x, req, ep, params)
		return
	}
	// §10 step 8b: Tier C by pair.
	if c := h.st.contracts.ActiveFor(caller.Agent.ID, x.method, x.path); c != nil {
		h.runContract(x, req, c, viaPair)
		return
	}
	// §10 step 9: unregistered pair.
	h.gateway(x, req)
}

// ulidPattern: 26 Crockford base32 characters, in either case (the
// ULID spec reads them case-insensitively), holding 128 bits, so the
// first is 0-7 (the largest ULID is 7ZZZZZZZZZZZZZZZZZZZZZZZZZ).
var ulidPattern = regexp.MustCompile(`^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$`)
var uuidV7Pattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// ValidRequestID reports whether s is a UUIDv7 (lowercase 8-4-4-4-12)
// or a ULID (26 Crockford base32 characters in either case, at most 128
// bits: the first is 0-7) (ids-02 §9.2, spec OP-7).
func ValidRequestID(s string) bool {
	return uuidV7Pattern.MatchString(s) || ulidPattern.MatchString(s)
}

// Session-ID lengths this gateway accepts. 22 base64url characters
// carry 128 bits, the least a Session-ID must hold (spec §3, agtp-09
// §11.4); anything shorter cannot be one.
const (
	minSessionIDLen = 22
	maxSessionIDLen = 256
)

// sessionIDForm describes the accepted Session-ID form in refusals.
const sessionIDForm = "22-256 characters of A-Z a-z 0-9 - . _ ~ + / = : holding at least 128 random bits (e.g. 16 random bytes in base64url: 22 characters)"

// validSessionID reports whether s has the form of a Session-ID:
// minSessionIDLen to maxSessionIDLen characters of base64 (either
// alphabet), token and URI-safe punctuation (`^[A-Za-z0-9._~+/=:-]{22,256}$`,
// checked byte by byte: it runs on every request that carries one).
func validSessionID(s string) bool {
	if len(s) < minSessionIDLen || len(s) > maxSessionIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '~', c == '+', c == '/', c == '=', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// sessionValue reads a session id sent in the body (what names it: the
// envelope session_id, PROPOSE's parameters.session_id): a string of
// the Session-ID form, else 400 invalid-session-id, as for the header.
func sessionValue(v any, what string) (string, *wireError) {
	s, ok := v.(string)
	if !ok {
		return "", errorf(400, "invalid-session-id", fmt.Sprintf("%s must be a string, not %s", what, schema.JSONTypeName(v)))
	}
	if !validSessionID(s) {
		return "", errorf(400, "invalid-session-id", what+" must be a Session-ID: "+sessionIDForm)
	}
	return s, nil
}

// Where a request's session came from, in order of precedence: the
// Session-ID header, the envelope session_id, PROPOSE's
// parameters.session_id.
const (
	sessionFromHeader     = "Session-ID header"
	sessionFromEnvelope   = "envelope session_id"
	sessionFromParameters = "parameters.session_id"
)

// adoptSession takes s, a valid session id read from the body at
// from, as the request's session (the one its contracts carry, so
// SUSPEND with session_id ends them) unless one came from a source of
// higher precedence; a different value there is logged, and the first
// source wins (AGTP headers win over the payload, spec OP-37).
func (x *exchange) adoptSession(s, from string) {
	switch {
	case x.sessionID == "":
		x.sessionID, x.sessionFrom = s, from
	case x.sessionID != s:
		x.h.logger.Info("session ids disagree; the "+x.sessionFrom+" wins (OP-37)", zap.String("agent_id", x.agentID),
			zap.String("session_id", x.sessionID), zap.String("from", x.sessionFrom),
			zap.String("ignored_session_id", s), zap.String("ignored_from", from))
	}
}

// identifiers records, for one request, which of Request-ID, Owner-ID
// and Session-ID it sent and which of those are malformed (checked once,
// in ServeHTTP; present means checked, so an empty one is malformed).
type identifiers struct {
	requestIDSent, ownerIDSent             bool
	badRequestID, badOwnerID, badSessionID bool
}

// checkIdentifiers refuses a malformed Request-ID, Session-ID or
// Owner-ID on every AGTP request, anonymous ones (no Agent-ID)
// included, without quoting it. Under strict_identifiers a request with
// Agent-ID must carry Owner-ID and Request-ID; an anonymous one need not
// (spec §3, OP-6, OP-7, §24 item 94). An Owner-ID's registry match is
// policy.ResolveCaller's.
func (h *Handler) checkIdentifiers(x *exchange, anonymous bool) *wireError {
	switch {
	case x.ids.badRequestID:
		return errorf(400, "invalid-request-id", "Request-ID must be a lowercase UUIDv7 or a ULID")
	case x.ids.badSessionID:
		return errorf(400, "invalid-session-id", "Session-ID must be "+sessionIDForm)
	case x.ids.badOwnerID:
		return errorf(400, "invalid-owner-id", "Owner-ID is not 1 to 256 characters of letters, digits, '-', '_', ':' and '.'")
	}
	if anonymous || !h.StrictIdentifiers {
		return nil
	}
	if !x.ids.ownerIDSent {
		return errorf(400, "owner-id-required", "this server requires Owner-ID with Agent-ID (strict_identifiers)")
	}
	if !x.ids.requestIDSent {
		return errorf(400, "request-id-required", "this server requires Request-ID with Agent-ID (strict_identifiers)")
	}
	return nil
}

// setRecordAgent makes x's Agent-ID, when it is a registered one, the
// Attribution-Record's agent_id and chain key, and that agent's
// registry owner its owner_id (ids-02 §8.2: owner_id goes with
// agent_id); else it leaves both "" (chained as an anonymous request:
// spec §16.2 wants 64 lowercase hex, and no request may add a chain key
// of its own choosing, nor have a claimed owner stated for it).
func (h *Handler) setRecordAgent(x *exchange) {
	if !x.agentIDValid {
		return
	}
	a, ok := h.agents.Lookup(x.agentID)
	if !ok {
		return
	}
	x.recordAgent, x.ownerID = x.agentID, a.OwnerID
}

// canonicalKeys maps the AGTP spelling of the request headers this
// handler reads ("Agent-ID") to Go's canonical form ("Agent-Id"), so the
// hot path does not canonicalize (and allocate) the same names per request.
var canonicalKeys = func() map[string]string {
	m := map[string]string{}
	for _, n := range append([]string{"Authority-Scope", "Traceparent", "Signature", "Signature-Input", "Content-Digest"}, singleValued...) {
		m[n] = http.CanonicalHeaderKey(n)
	}
	return m
}()

// canonicalKey returns name in Go's canonical header form.
func canonicalKey(name string) string {
	if k, ok := canonicalKeys[name]; ok {
		return k
	}
	return http.CanonicalHeaderKey(name)
}

// headerGet is r.Header.Get(name) without canonicalizing a known name.
func headerGet(r *http.Request, name string) string {
	if v := r.Header[canonicalKey(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// headerValue returns the joined header value and whether the header
// was present at all.
func headerValue(r *http.Request, name string) (string, bool) {
	vals, ok := r.Header[canonicalKey(name)]
	if !ok {
		return "", false
	}
	return strings.Join(vals, ", "), true
}

func catalogWarning(info *policy.MethodInfo) string {
	s := "deprecated"
	if info.Successor != "" {
		s += "; successor=" + info.Successor
	}
	if info.RemovedIn != "" {
		s += "; removed_in=" + info.RemovedIn
	}
	return s
}

// parseQuery parses the request's query once for every tier, refusing
// what net/url would partly drop (a malformed percent-escape, a ';'
// separator) and keys or values that are not UTF-8: parameters come from
// the pairs the agent sent, or the request is refused (400
// invalid-query, with the returned error as the explanation). A key
// given more than once (in any spelling: "a" and "%61" are one key once
// decoded) keeps all its values in order; every reader takes the last
// one (spec §2.1: repeated query keys keep the last value; queryValue).
// Only AGTP requests are parsed here; legacy HTTP passes through
// untouched.
func parseQuery(raw string) (url.Values, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, errors.New("the query string is malformed (a bad percent-escape or a ';' separator); encode each pair as key=value joined by '&'")
	}
	for k, vs := range vals {
		if !utf8.ValidString(k) {
			return nil, errors.New("a query key is not UTF-8 once percent-decoded")
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return nil, errors.New("a query value is not UTF-8 once percent-decoded")
			}
		}
	}
	return vals, nil
}

// queryValue returns the value of query key name, the last one when
// the key is repeated (spec §2.1), and whether the key was given.
func queryValue(q url.Values, name string) (string, bool) {
	vs := q[name]
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

// dispatchTo makes the normalized path the exchange's pair: §10 step 3
// (redirects), step 4 (path grammar) and step 5 (method policy). serve
// runs it on the request path, discover on a DISCOVER body target.
func (h *Handler) dispatchTo(x *exchange, path string) *wireError {
	x.method, x.path = h.methods.ApplyRedirects(x.method, path)
	if ref := h.methods.CheckPath(x.path); ref != nil {
		return fromRefusal(ref)
	}
	if h.methods.Disallowed(x.method) {
		return h.methodNotAllowed(x, fmt.Sprintf("method %s is not allowed on this server", x.method))
	}
	return nil
}

// fingerprintTarget is the request target the Idempotency-Key
// fingerprint compares (ARCHITECTURE.md "Idempotency"): the path in the
// RFC 3986 normal form every tier routes by (policy.NormalizePath, as
// requested, before redirects) and, when the query holds a key, "?" and
// canonicalQuery. "/%72oom?" and "/room" are one target; so are
// "?b=2&a=1" and "?a=0&a=1&b=2".
func (x *exchange) fingerprintTarget() string {
	if q := canonicalQuery(x.query); q != "" {
		return x.requestPath + "?" + q
	}
	return x.requestPath
}

// canonicalQuery is q as its readers see it: each key once with the
// value every reader takes (the last, spec §2.1; queryValue), keys
// sorted, key and value percent-encoded as url.Values.Encode does; ""
// when q holds no key (no query, "?" or "&" alone). Two queries that
// give every reader the same values have one canonical form, whatever
// their key order, escaping or repeated keys.
func canonicalQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	last := make(url.Values, len(q))
	for k := range q {
		v, _ := queryValue(q, k)
		last[k] = []string{v}
	}
	return last.Encode()
}

// maxTaskIDLen is the longest task id accepted, in bytes (= characters:
// a task id is ASCII), as for Session-ID and Owner-ID.
const maxTaskIDLen = 256

// taskIDForm describes the accepted task id form in refusals.
const taskIDForm = "1-256 visible ASCII characters (! to ~: no space, no control or non-ASCII character), e.g. task-0042 or a UUID"

// validTaskID reports whether s has the form of a task id, sent as the
// Task-ID header or the envelope task_id (one rule for both): 1 to
// maxTaskIDLen visible ASCII characters (RFC 5234 VCHAR, 0x21-0x7E, as
// Idempotency-Key). A task id is opaque (spec §3) and echoed unchanged
// in the Task-ID header, the body's task_id and the
// Attribution-Record, so it must be a header value that no hop
// rewrites: no space (an HTTP field value loses its leading and
// trailing ones), no control character, nothing outside ASCII. An
// empty one is not "no task id": a request without one omits it (or
// sends task_id null).
func validTaskID(s string) bool { return visibleASCII(s, maxTaskIDLen) }

// visibleASCII reports whether s is 1 to max visible ASCII characters
// (RFC 9110 VCHAR, 0x21-0x7E): a header value no hop rewrites.
func visibleASCII(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// decodeBody decodes a request body as exactly one JSON value (RFC
// 8259) in one pass, with encoding/json/v2's strict reading: an object
// naming one key twice (400 duplicate-key: encoding/json would keep the
// last one), invalid UTF-8, trailing data or a syntax error (400
// invalid-json) are refused, never repaired. Errors describe the place,
// never echo the body. Numbers decode to float64 as in encoding/json.
func decodeBody(raw []byte) (any, *wireError) {
	var v any
	var opts []jsonv2.Options // none: the common case, without an option merge
	if recipes.HasLongDigitRun(raw) {
		// An integer beyond ±2^53 is refused rather than sent on rounded.
		opts = []jsonv2.Options{recipes.RefuseInexactIntegers}
	}
	err := jsonv2.Unmarshal(raw, &v, opts...)
	if err == nil {
		return v, nil
	}
	var ie *recipes.InexactIntegerError
	var me *jsonv2.SemanticError
	if errors.As(err, &ie) && errors.As(err, &me) {
		return nil, errorf(400, "invalid-json", fmt.Sprintf("the integer at %s has %d digits and is beyond ±2^53, which this gateway cannot carry exactly (RFC 7493 §2.2); send it as a string",
			textcut.Clip(pointerOrRoot(me.JSONPointer)), ie.Digits))
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return nil, errorf(400, "duplicate-key", fmt.Sprintf("the request body names the key %q twice in one object (at %s)",
			textcut.Clip(se.JSONPointer.LastToken()), textcut.Clip(pointerOrRoot(se.JSONPointer.Parent()))))
	}
	return nil, errorf(400, "invalid-json", "the request body is not one JSON value: "+jsonProblem(err))
}

// jsonProblem describes a body decode failure without echoing the body.
func jsonProblem(err error) string {
	var se *jsontext.SyntacticError
	var me *jsonv2.SemanticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	case errors.As(err, &se):
		switch {
		case se.Err != nil && (strings.Contains(se.Err.Error(), "UTF-8") || strings.Contains(se.Err.Error(), "surrogate")):
			return fmt.Sprintf("invalid UTF-8 or an unpaired surrogate escape at byte %d", se.ByteOffset)
		case se.Err != nil && strings.Contains(se.Err.Error(), "max depth"):
			return fmt.Sprintf("nesting deeper than %d levels at byte %d", maxJSONDepth, se.ByteOffset)
		case errors.Is(se.Err, io.ErrUnexpectedEOF):
			return "truncated"
		}
		return fmt.Sprintf("syntax error at byte %d", se.ByteOffset)
	case errors.As(err, &me):
		return fmt.Sprintf("value not representable at byte %d (%s)", me.ByteOffset, pointerOrRoot(me.JSONPointer))
	}
	return "invalid JSON"
}

// bodyReadError describes a failed request body read (read bytes of
// the want that Content-Length announced) without the error's text:
// network errors name socket addresses ("read tcp 127.0.0.1:8080->…"),
// which an answer must not carry. The log keeps the error itself.
func bodyReadError(err error, read int, want int64) *wireError {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		// A request_body max_size in front of the gateway.
		return &wireError{Status: 413, Reason: "body-too-large", Explanation: fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit),
			Fields: map[string]any{"limit_bytes": mbe.Limit}}
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return errorf(400, "invalid-body", fmt.Sprintf("the request body timed out: %d of the %d bytes Content-Length announced arrived before the server's read timeout", read, want))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return errorf(400, "invalid-body", fmt.Sprintf("the request body ended early: %d of the %d bytes Content-Length announced", read, want))
	}
	return errorf(400, "invalid-body", fmt.Sprintf("the request body could not be read: the connection failed after %d of the %d bytes Content-Length announced", read, want))
}

// maxJSONDepth is encoding/json/v2's nesting limit for decoded bodies.
const maxJSONDepth = 10000

// pointerOrRoot renders an RFC 6901 pointer, "/" for the whole document.
func pointerOrRoot(p jsontext.Pointer) string {
	if p == "" {
		return "/"
	}
	return string(p)
}

// checkContentEncoding refuses a request body sent with a content
// coding (Content-Encoding: gzip, br, …): the gateway reads bodies as
// sent, so it would read the coded bytes as JSON. RFC 9110 §15.5.16
// and §12.5.3: 415, with Accept-Encoding naming what is accepted (the
// caller adds "Accept-Encoding: identity"). "identity", no coding, is
// accepted.
func checkContentEncoding(h http.Header) *wireError {
	vals, ok := h["Content-Encoding"]
	if !ok {
		return nil
	}
	var codings []string
	for _, v := range vals {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		return nil
	}
	return errorf(http.StatusUnsupportedMediaType, "unsupported-content-encoding",
		fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed, without Content-Encoding", textcut.Clip(strings.Join(codings, ", "))))
}

// checkContentType enforces spec OP-30 on request bodies.
func checkContentType(values []string) *wireError {
	if len(values) > 1 {
		// A singleton field (RFC 9110 §8.3): which of several would be
		// meant is not knowable, so none is guessed.
		return errorf(400, "unsupported-content-type", fmt.Sprintf("Content-Type appears %d times; send it once", len(values)))
	}
	ct := ""
	if len(values) == 1 {
		ct = values[0]
	}
	if ct == "" {
		return errorf(400, "unsupported-content-type", "a request with a body needs a JSON Content-Type")
	}
	switch ct { // the accepted types exactly, as agents send them: no parse
	case "application/json", mediaAGTP, "application/agtp+json", mediaEndpoint:
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil {
		switch mt {
		case "application/json", mediaAGTP, "application/agtp+json", mediaEndpoint:
			// JSON exchanged between systems is UTF-8 (RFC 8259 §8.1),
			// and the body is decoded as such: a charset naming another
			// encoding would be read wrongly, so it is refused.
			if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
				return errorf(400, "unsupported-content-type", fmt.Sprintf("Content-Type charset %q is not accepted: AGTP bodies are UTF-8 JSON (RFC 8259 §8.1); send charset=utf-8 or no charset", textcut.Clip(cs)))
			}
			return nil
		}
	}
	return errorf(400, "unsupported-content-type", fmt.Sprintf("Content-Type %q is not accepted; send application/json or %s", textcut.Clip(ct), mediaAGTP))
}

func localIsLoopback(r *http.Request) bool {
	addr, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if addr == nil {
		return false
	}
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// traceParent is the request's traceparent field when it has exactly
// one (W3C Trace Context §3.2: several make it invalid), else "";
// recipes.WithTraceParent forwards it only when valid.
func traceParent(r *http.Request) string {
	if v := r.Header["Traceparent"]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// presentedContract reads Contract-Synthesized and its alias
// Synthesis-Id (spec §13.5, OP-3).
func presentedContract(r *http.Request) (string, bool, *wireError) {
	cs, okCS := headerValue(r, "Contract-Synthesized")
	si, okSI := headerValue(r, "Synthesis-Id")
	if !okCS && !okSI {
		return "", false, nil
	}
	if okCS && okSI && cs != si {
		return "", false, errorf(400, "ambiguous-contract", "Contract-Synthesized and Synthesis-Id name different contracts")
	}
	id := cs
	if !okCS {
		id = si
	}
	if !recipes.ValidSynthesisID(id) {
		return "", false, errorf(400, "invalid-synthesis-id", "a synthesis id is 1-128 characters of A-Z a-z 0-9 . _ ~ -")
	}
	return id, true, nil
}

func (h *Handler) methodNotAllowed(x *exchange, why string) *wireError {
	allowed := []string{}
	for _, m := range h.set.MethodsForPath(x.path) {
		if !h.methods.Disallowed(m) {
			allowed = append(allowed, m)
		}
	}
	return &wireError{Status: 405, Reason: "method-not-allowed", Explanation: why,
		Fields: map[string]any{"allowed_methods_for_path": allowed, "redirects_for_path": h.methods.RedirectsFor(x.path)}}
}

var envelopeKeys = map[string]bool{"method": true, "task_id": true, "session_id": true, "parameters": true, "context": true}

// input assembles an invocation's input (spec OP-32, api-01 §5.5):
// envelope parameters, plus query parameters (body wins; a repeated
// query key keeps its last value, spec §2.1), plus template parameters
// (a different body value is an error).
func (x *exchange) input(req *request, params map[string]string) (map[string]any, *wireError) {
	for k := range req.body {
		if !envelopeKeys[k] {
			return nil, errorf(400, "invalid-envelope", fmt.Sprintf("unknown envelope field %q; put the input under \"parameters\"", textcut.Clip(k)))
		}
	}
	in, e := envelopeParameters(req)
	if e != nil {
		return nil, e
	}
	for k := range x.query {
		if _, inBody := in[k]; !inBody {
			in[k], _ = queryValue(x.query, k)
		}
	}
	for k, v := range params {
		if bv, ok := in[k]; ok {
			if s, isStr := bv.(string); !isStr || s != v {
				return nil, errorf(400, "parameter-conflict", fmt.Sprintf("parameter %q is given by the path as %q and differently in the request", textcut.Clip(k), textcut.Clip(v)))
			}
		}
		in[k] = v
	}
	return in, nil
}

// invokeEndpoint serves a Tier B endpoint (spec §10 step 8).
func (h *Handler) invokeEndpoint(x *exchange, req *request, ep *recipes.Endpoint, params map[string]string) {
	extra := map[string]string{}
	if ep.Deprecated != nil {
		extra["AGTP-Endpoint-Warning"] = endpointWarning(ep)
	}
	if h.scopeRequired() && !req.caller.ScopeHeader {
		e := scopeHeaderRequired()
		x.failWith(e, extra)
		return
	}
	if ref := policy.CheckRequiredScopes(req.caller, ep.RequiredScopes); ref != nil {
		x.failWith(fromRefusal(ref), extra)
		return
	}
	// The Idempotency-Key first (spec §11.2 order): a key reused for
	// another request is that, whatever its input; a claim that ends in
	// a refusal below is released, not stored.
	if !h.claim(x, req) {
		return
	}
	in, e := x.input(req, params)
	if e != nil {
		x.failWith(e, extra)
		return
	}
	if f := ep.ValidateInput(in); f != nil {
		x.failWith(failureError(f), extra)
		return
	}
	if !h.spend(x, req, h.invokeRL) {
		return
	}
	x.executed = true
	x.stateChanging = schema.StateChanging(ep.Semantic.Impact)
	ctx := recipes.WithTraceParent(context.WithoutCancel(x.r.Context()), traceParent(x.r))
	start := time.Now()
	out, f := ep.InvokeValidated(ctx, in)
	if f == nil || f.Sent {
		h.metrics.endpointCall(ep, failureClass(f), time.Since(start).Seconds())
	}
	if f != nil {
		switch {
		case f.Code != recipes.ErrInvalidInput:
			status := zap.Skip() // no upstream status came back (a timeout, a refused connection)
			if f.UpstreamStatus != 0 {
				status = zap.Int("upstream_status", f.UpstreamStatus)
			}
			h.logger.Warn("upstream failure", zap.String("agent_id", x.agentID), zap.String("endpoint", ep.Method+" "+ep.Path),
				zap.String("upstream", ep.UpstreamName()), zap.String("reason", f.Code), status,
				zap.NamedError("cause", f.Internal))
		case f.Internal != nil:
			// An operator's query or body mapping failed on this input:
			// the agent sees which mapping, the operator needs the jq
			// error (with the expression), which only the log carries.
			h.logger.Warn("endpoint mapping failed", zap.String("agent_id", x.agentID), zap.String("endpoint", ep.Method+" "+ep.Path),
				zap.String("upstream", ep.UpstreamName()), zap.NamedError("cause", f.Internal))
		}
		x.failWith(failureError(f), extra)
		return
	}
	x.write(200, mediaAGTP, envelope(200, x.taskID, out), extra)
}

// failureClass is the metrics class of an endpoint outcome.
func failureClass(f *recipes.Failure) string {
	if f == nil {
		return "ok"
	}
	for _, c := range recipes.UpstreamErrors {
		if f.Code == c {
			return c
		}
	}
	return "mapped"
}

func endpointWarning(ep *recipes.Endpoint) string {
	s := "deprecated"
	if d := ep.Deprecated; d != nil {
		if d.Successor != nil {
			s += "; successor=" + d.Successor.Method + " " + d.Successor.Path
		}
		if d.RemovedIn != "" {
			s += "; removed_in=" + d.RemovedIn
		}
	}
	return s
}

// failWith is fail with extra headers on the answer, added to the
// exchange's failHeaders (a later one wins).
func (x *exchange) failWith(e *wireError, extra map[string]string) {
	if len(extra) > 0 {
		merged := make(map[string]string, len(x.failHeaders)+len(extra))
		maps.Copy(merged, x.failHeaders)
		maps.Copy(merged, extra)
		x.failHeaders = merged
	}
	x.fail(e)
}

// envelopeBody is the AGTP response envelope (agtp-09 §6.7): a struct,
// so encoding it needs no map sorting.
type envelopeBody struct {
	Result any    `json:"result"`
	Status int    `json:"status"`
	TaskID string `json:"task_id,omitempty"`
}

func envelope(status int, taskID string, result any) envelopeBody {
	return envelopeBody{Status: status, TaskID: taskID, Result: result}
}

// transient reports whether retrying the same request may succeed: an
// upstream timeout, a connection failure, or an unmapped 5xx/429.
func transient(f *recipes.Failure) bool {
	switch f.Code {
	case recipes.ErrUpstreamTimeout, recipes.ErrUpstreamConnection:
		return true
	case recipes.ErrUpstream:
		return f.UpstreamStatus >= 500 || f.UpstreamStatus == 429
	}
	return false
}

// failureError maps an endpoint Failure to the §19 body of a named 422.
func failureError(f *recipes.Failure) *wireError {
	details := f.Details
	if details == nil {
		details = map[string]any{}
	}
	retryable := f.SideEffectFree && transient(f)
	return &wireError{Status: f.Status, Reason: f.Code, Explanation: f.Explanation, Retryable: retryable,
		Fields: map[string]any{"error": map[string]any{"code": f.Code, "details": details}}}
}

func scopeHeaderRequired() *wireError {
	return &wireError{Status: policy.StatusAuthorizationRequired, Reason: "scope-required",
		Explanation: "this server requires an Authority-Scope header on invocations (scope_required_for_invocation)",
		Fields:      map[string]any{"type": "scope-required"}}
}

// present serves a request that presents a contract (spec §10 step 7,
// §14.1): the gate is skipped and no synthesis starts.
func (h *Handler) present(x *exchange, req *request, id string) {
	c, res := h.st.contracts.Lookup(id)
	if res == recipes.LookupUnknown {
		h.metrics.presentation(viaSynthesisID, "not_found")
		x.fail(errorf(404, "contract-not-found", "no contract with this synthesis id exists (unknown, released or swept)"))
		return
	}
	// Whose it is comes before how it ended: another agent learns
	// nothing of a contract's state (§10 step 7).
	if c.OriginatingAgentID != req.caller.Agent.ID {
		h.metrics.presentation(viaSynthesisID, "not_yours")
		h.refuse464(x, req, nil, "contract-not-yours", "the contract is bound to another agent")
		return
	}
	if res == recipes.LookupRevoked {
		h.metrics.presentation(viaSynthesisID, "revoked")
		h.refuse464(x, req, nil, "contract-revoked", "the contract has expired or was revoked; synthesize a new one")
		return
	}
	if c.Method != x.method || c.Path != x.path {
		h.metrics.presentation(viaSynthesisID, "not_found")
		x.fail(errorf(404, "contract-not-found", fmt.Sprintf("the presented contract serves %s %s, not this pair", c.Method, c.Path)))
		return
	}
	if req.idemKey != "" {
		// The key's stored answer is checked against the presented
		// contract, and a still-pending one's 461 may be confirmed
		// under it (claim, ClaimConfirming).
		x.presentedID = c.SynthesisID
		x.presentedPending = h.st.contracts.State(c) == recipes.StatePending
	}
	h.runContract(x, req, c, viaSynthesisID)
}

// How a request found the contract it runs under: its synthesis id
// (Contract-Synthesized, §10 step 7) or its (method, path) pair (Tier C,
// step 8b); the via label of caddy_rcns_contract_presentations_total.
const (
	viaSynthesisID = "synthesis_id"
	viaPair        = "pair"
)

// runContract executes a contract's captured plan and answers 200
// (spec §13.4 "Invocation under a contract"). It counts the
// presentation once: executed, failed, or not_run when it answered
// without running the plan (a refusal, or an idempotent replay).
func (h *Handler) runContract(x *exchange, req *request, c *recipes.Contract, via string) {
	outcome := "not_run"
	defer func() { h.metrics.presentation(via, outcome) }()
	if h.scopeRequired() && !req.caller.ScopeHeader {
		x.fail(scopeHeaderRequired())
		return
	}
	if ref := policy.CheckRequiredScopes(req.caller, c.Recipe.RequiredScopes); ref != nil {
		x.fail(fromRefusal(ref))
		return
	}
	if !h.claim(x, req) { // first, as in invokeEndpoint
		return
	}
	in, e := x.input(req, nil)
	if e != nil {
		x.fail(e)
		return
	}
	if f := c.Recipe.ValidateInput(in); f != nil {
		x.fail(failureError(f))
		return
	}
	if !h.spend(x, req, h.invokeRL) {
		return
	}
	if via == viaSynthesisID {
		// Presenting a confirm-first contract accepts it (spec §13.4),
		// but only a presentation that runs it: a refused one (scope,
		// input, budget) leaves it pending, so it still serves no pair.
		activated := h.st.contracts.Activate(c)
		if preview := x.claim.Preview(); preview != nil && !activated {
			// This presentation took its key's 461 over to confirm the
			// contract, but another request accepted it meanwhile:
			// the key's preview stays, and is answered, as for a
			// contract already confirmed; nothing runs under the key.
			// (Unlike a replay found by claim, this one comes after the
			// invocation budget was spent: the race is rare, and
			// spending after the activation would let a refused
			// presentation accept the contract.)
			x.claim.Abandon()
			x.claim = nil
			h.metrics.idempotency("replay")
			x.replay(preview)
			return
		}
	}
	// Only now does the answer name the contract: every refusal above
	// ran nothing (spec §16.1).
	x.contract = contractRef(c)
	x.executed = true
	x.stateChanging = c.Recipe.StateChanging()
	out, ok := h.execute(x, c, in)
	if !ok {
		outcome = "failed"
		return
	}
	outcome = "executed"
	x.write(200, mediaAGTP, envelope(200, x.taskID, out), nil)
}

// contractRef is what an answer produced by running c says of it
// (Contract-Synthesized and the Attribution-Record fields, spec §16.1).
func contractRef(c *recipes.Contract) idempotency.ContractRef {
	return idempotency.ContractRef{SynthesisID: c.SynthesisID, ContractHash: c.ContractHash, NegotiationOrigin: c.NegotiationOrigin}
}

// execute runs c's plan; on failure it writes the 422 composition_failed
// answer and returns false.
func (h *Handler) execute(x *exchange, c *recipes.Contract, in map[string]any) (any, bool) {
	ctx := recipes.WithTraceParent(x.r.Context(), traceParent(x.r))
	start := time.Now()
	out, reports, cf := c.Recipe.Execute(ctx, in, time.Duration(h.CompositionTimeout))
	h.metrics.recipeRun(c.Recipe, time.Since(start).Seconds(), reports)
	if cf != nil {
		fields := []zap.Field{zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
			zap.String("recipe", c.Lineage.RecipeName), zap.String("reason", cf.Cause.Code)}
		if cf.FailedStep != nil {
			fields = append(fields, zap.String("step", cf.FailedStep.Name), zap.String("upstream", cf.FailedStep.Endpoint.UpstreamName()))
		}
		if cf.Cause.Internal != nil {
			// A transport error or an operator's mapping error: for the
			// log only, never the answer (it may name hosts or jq).
			fields = append(fields, zap.NamedError("cause", cf.Cause.Internal))
		}
		h.logger.Warn("composition failed", fields...)
		details := cf.Details()
		body := map[string]any{"error": map[string]any{"code": recipes.ErrCompositionFailed, "details": details}}
		if cf.FailedStep != nil {
			body["failed_step"] = cf.FailedStep.Name
		}
		x.fail(&wireError{Status: 422, Reason: recipes.ErrCompositionFailed, Explanation: cf.Error(), Retryable: cf.SideEffectFree && transient(cf.Cause), Fields: body})
		return nil, false
	}
	return out, true
}

// refuse464 answers 464 with a fresh RCNS-Attempt-Id and keeps the
// attempt record (spec §11.1, §17.3).
func (h *Handler) refuse464(x *exchange, req *request, states *policy.LockStates, reason, explanation string) {
	h.refuse(x, req, states, &wireError{Status: policy.StatusNoContract, Reason: reason, Explanation: explanation})
}

func (h *Handler) refuse(x *exchange, req *request, states *policy.LockStates, e *wireError) {
	rec := &attemptRecord{ID: recipes.NewAttemptID(), Method: x.method, Path: x.path, Reason: e.Reason,
		Explanation: e.Explanation, At: time.Now().UTC().Format(time.RFC3339)}
	if req.caller != nil {
		rec.AgentID = req.caller.Agent.ID
		rec.TrustTier = int(req.caller.Agent.TrustTier)
	}
	if states != nil {
		rec.Locks = states.Map()
		for i, st := range states {
			if st == policy.LockClosed {
				h.metrics.lockRefusal(policy.Lock(i + 1).String())
			}
		}
	}
	h.st.attempts.add(rec)
	h.metrics.setAttemptRingSize(h.st.attempts.len())
	if e.Status == policy.StatusNoContract {
		e.AttemptID = rec.ID
	}
	h.logger.Info("rcns refusal", zap.String("agent_id", rec.AgentID), zap.String("attempt_id", rec.ID),
		zap.String("method", x.method), zap.String("reason", e.Reason))
	x.fail(e)
}

// gateway handles an unregistered pair (spec §10 step 9, §11).
func (h *Handler) gateway(x *exchange, req *request) {
	optIn := policy.AllowRCNS(headerGet(x.r, "Allow-RCNS"))
	if optIn {
		defer func() {
			switch {
			case x.replayed:
			case x.minted != nil:
				h.metrics.gateEvaluation("accepted", "")
			default:
				h.metrics.gateEvaluation("refused", x.reason)
			}
		}()
	}
	if optIn {
		x.beforeWrite = func(int) {
			if x.replayed {
				return
			}
			requested := map[string]any{"method": x.method, "path": x.path, "allow_rcns": true}
			if x.minted != nil {
				h.negotiationRecord(x, records.KindGate, records.OutcomeAccepted, "", requested, grantedOf(x.minted, false))
				return
			}
			h.negotiationRecord(x, records.KindGate, records.OutcomeRefused, x.reason, requested, nil)
		}
	}
	states, proceed, ref := h.gate.Locks12(optIn)
	if ref != nil {
		h.refuse(x, req, &states, fromRefusal(ref))
		return
	}
	if !proceed {
		h.metrics.lockRefusal(policy.LockCallerOptIn.String())
		if len(h.set.MethodsForPath(x.path)) > 0 {
			x.fail(h.methodNotAllowed(x, fmt.Sprintf("no endpoint serves %s %s; the path is served under other methods", x.method, x.path)))
			return
		}
		x.fail(errorf(404, "not-found", fmt.Sprintf("no endpoint serves %s %s", x.method, x.path)))
		return
	}
	// Locks 1–2 are open: idempotent replay first, then the RCNS budget,
	// then locks 3–4 (spec §11.2, OP-4).
	if !h.claim(x, req) {
		return
	}
	if h.scopeRequired() && !req.caller.ScopeHeader {
		x.fail(scopeHeaderRequired())
		return
	}
	if !h.spend(x, req, h.gateRL) {
		return
	}
	if ref := h.gate.Locks34(req.caller, &states); ref != nil {
		h.refuse(x, req, &states, fromRefusal(ref))
		return
	}
	recipe := h.set.Match(x.method, x.path)
	if recipe == nil {
		h.refuse464(x, req, &states, "composition-impossible", fmt.Sprintf("no recipe can synthesize %s %s", x.method, x.path))
		return
	}
	if recipe.Depth() > h.MaxSynthesisDepth {
		h.refuse464(x, req, &states, "composition-impossible",
			fmt.Sprintf("recipe %s needs %d steps; max_synthesis_depth is %d", recipe.Name, recipe.Depth(), h.MaxSynthesisDepth))
		return
	}
	// Authority preservation, before any upstream call (spec §13.3).
	if ref := policy.CheckRequiredScopes(req.caller, recipe.RequiredScopes); ref != nil {
		h.refuse(x, req, &states, fromRefusal(ref))
		return
	}
	in, e := x.input(req, nil)
	if e != nil {
		x.fail(e)
		return
	}
	if f := recipe.ValidateInput(in); f != nil {
		x.fail(failureError(f))
		return
	}
	c, err := h.newContract(recipe, x, req, recipes.OriginGate)
	if err != nil {
		h.refuse464(x, req, &states, "synthesis-error", err.Error())
		return
	}
	x.executed = true
	x.minted = c
	h.lifecycleEvent(records.EventProposeAccepted, c, req.caller.Agent.ID, "", "")
	h.logger.Info("rcns contract synthesized", zap.String("agent_id", x.agentID), zap.String("synthesis_id", c.SynthesisID),
		zap.String("recipe", recipe.Name), zap.String("recipe_version", recipe.Version), zap.String("mode", h.Mode))
	h.metrics.setActiveContracts(h.st.contracts.Len())
	body := contractBody(c)
	if h.Mode == ModeConfirmFirst {
		h.metrics.synthesis(recipe.Name, ModeConfirmFirst, "previewed")
		body.members["status"] = policy.StatusContractAvailable
		x.write(policy.StatusContractAvailable, mediaEndpoint, body, nil)
		return
	}
	x.contract = contractRef(c)
	x.stateChanging = c.Recipe.StateChanging()
	out, ok := h.execute(x, c, in)
	if !ok {
		h.metrics.synthesis(recipe.Name, ModeOptimistic, "failed")
		return
	}
	h.metrics.synthesis(recipe.Name, ModeOptimistic, "executed")
	body.members["status"] = policy.StatusProposalApproved
	body.members["result"] = out
	if x.taskID != "" {
		body.members["task_id"] = x.taskID
	}
	x.write(policy.StatusProposalApproved, mediaEndpoint, body, nil)
}

// claim claims the request's Idempotency-Key, if it has one. It returns
// true when the request should go on (it then holds the claim); false
// when it has been answered: a replay, 409 in flight, 422 key reused, or
// 503 store full (spec §12.2, ARCHITECTURE.md "Idempotency").
func (h *Handler) claim(x *exchange, req *request) bool {
	if req.idemKey == "" {
		return true
	}
	fp := idempotency.Fingerprint(x.r.Method, x.fingerprintTarget(), req.raw)
	// A presentation that confirms the 461 its key stored runs the
	// contract under the key instead of replaying the preview
	// (ClaimConfirming); any other presentation is claimed as a repeat.
	outcome, resp, c := h.st.idem.ClaimConfirming(req.caller.Agent.ID, req.idemKey, fp, x.presentedID, x.presentedPending)
	h.metrics.setIdempotencyRecords(h.st.idem.Len())
	switch outcome {
	case idempotency.Execute:
		x.claim = c
		return true
	case idempotency.Replay:
		h.metrics.idempotency("replay")
		x.replay(resp)
	case idempotency.Mismatch:
		h.metrics.idempotency("conflict")
		x.fail(errorf(422, "idempotency-key-reused", "this Idempotency-Key was used for a different request (method, target or body); use a new key"))
	case idempotency.OtherContract:
		h.metrics.idempotency("conflict")
		x.fail(errorf(422, "idempotency-key-reused", "this Idempotency-Key holds the answer for another contract than the one presented (its 461 preview or its result); use a new key"))
	case idempotency.InFlight:
		h.metrics.idempotency("in_flight")
		x.fail(&wireError{Status: 409, Reason: "idempotency-key-in-flight", Explanation: "a request with this Idempotency-Key is still running; retry after it completes", Retryable: true})
	default: // AgentFull, StoreFull
		h.metrics.idempotency("store_full")
		x.fail(idempotencyStoreFull(outcome, h.st.idem.Limits()))
	}
	return false
}

// idempotencyStoreFull is the 503 for a Claim answered AgentFull or
// StoreFull (o): it names the bound that was hit, the store's
// (idempotency_max_records, reported when both are) or this agent's
// (idempotency_max_per_agent), with its effective value (defaults
// applied) in limit_records.
func idempotencyStoreFull(o idempotency.Outcome, l idempotency.Limits) *wireError {
	knob, limit := "idempotency_max_per_agent", l.MaxPerAgent
	expl := fmt.Sprintf("this agent holds its maximum of %d idempotency records (idempotency_max_per_agent); retry after some expire", limit)
	if o == idempotency.StoreFull {
		knob, limit = "idempotency_max_records", l.MaxRecords
		expl = fmt.Sprintf("the gateway's idempotency store holds its maximum of %d records for all agents (idempotency_max_records); retry later", limit)
	}
	return &wireError{Status: 503, Reason: "idempotency-store-full", Explanation: expl, Retryable: true,
		Fields: map[string]any{"bound": knob, "limit_records": limit}}
}

// spend takes one token of budget l for the caller (nil l: no budget).
// On refusal it answers 429 with Retry-After, RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers-10) and the §12.1 body.
func (h *Handler) spend(x *exchange, req *request, l *ratelimit.Limiter) bool {
	if l == nil {
		return true
	}
	d := l.Allow(req.caller.Agent.ID)
	x.rateHeaders = map[string]string{"RateLimit-Policy": l.PolicyHeader(), "RateLimit": l.RateLimitHeader(d)}
	if d.Allowed {
		return true
	}
	h.metrics.rateLimited(l.Budget().Name)
	secs := ratelimit.RetryAfterSeconds(d)
	x.rateHeaders["Retry-After"] = strconv.Itoa(secs)
	scope := l.Budget().Name
	h.logger.Info("rate limited", zap.String("agent_id", x.agentID), zap.String("budget", scope), zap.String("method", x.method))
	x.fail(&wireError{Status: 429, Reason: "rate-limited", Retryable: true,
		Explanation: fmt.Sprintf("the %s budget of this agent is spent; retry in %d s", scope, secs),
		Fields:      map[string]any{"scope": scope, "retry_after_seconds": secs}})
	return false
}

// newContract mints and stores a gate contract for the caller.
func (h *Handler) newContract(r *recipes.Recipe, x *exchange, req *request, origin string) (*recipes.Contract, error) {
	return h.mintContract(r, x.method, x.path, x, req, origin, time.Duration(h.ContractTTL), false)
}

// mintContract mints and stores a contract with lifetime ttl.
func (h *Handler) mintContract(r *recipes.Recipe, method, path string, x *exchange, req *request, origin string, ttl time.Duration, persistent bool) (*recipes.Contract, error) {
	lin := r.Lineage()
	hash, epJSON, err := r.ContractHashFor(method, path)
	if err != nil {
		return nil, fmt.Errorf("contract hash: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	c := &recipes.Contract{
		SynthesisID: recipes.NewSynthesisID(), Method: method, Path: path, Recipe: r, EndpointJSON: epJSON,
		Lineage: lin, ContractHash: hash, OriginatingAgentID: req.caller.Agent.ID, NegotiationOrigin: origin,
		IssuedAt: now, ExpiresAt: now.Add(ttl), SessionID: x.sessionID, Persistent: persistent,
	}
	state := recipes.StateActive
	if h.Mode == ModeConfirmFirst && origin == recipes.OriginGate {
		state = recipes.StatePending
	}
	if err := h.st.contracts.Put(c, state); err != nil {
		var le *recipes.LimitError
		switch {
		case errors.As(err, &le) && errors.Is(err, recipes.ErrAgentFull):
			return nil, fmt.Errorf("the agent already holds %d live contracts; max_contracts_per_agent is %d; release some first", le.Held, le.Limit)
		case le != nil:
			return nil, fmt.Errorf("the gateway holds %d live contracts, its maximum (max_contracts is %d); try later", le.Held, le.Limit)
		default:
			return nil, err
		}
	}
	return c, nil
}

// contractBody is the §13.4 body shared by 461 and 263.
func contractBody(c *recipes.Contract) *contractAnswer {
	return &contractAnswer{endpoint: c.EndpointJSON, members: map[string]any{
		"synthesis_id":       c.SynthesisID,
		"method":             c.Method,
		"path":               c.Path,
		"recipe_lineage":     c.Lineage,
		"contract_hash":      c.ContractHash,
		"negotiation_origin": c.NegotiationOrigin,
		"issued_at":          c.IssuedAt.Format(time.RFC3339),
		"expires_at":         c.ExpiresAt.Format(time.RFC3339),
	}}
}

// contractAnswer is a §13.4 contract body: the contract's endpoint as
// the RFC 8785 bytes contract_hash covers (Contract.EndpointJSON),
// written unchanged, and every other member (members; callers add
// status, result, task_id…) encoded as encoding/json would (json/v2
// with responseJSON: TestContractAnswerEncoding). Re-encoding the
// endpoint (both schemas) as a json.RawMessage cost a full re-scan on
// every synthesis.
type contractAnswer struct {
	members  map[string]any
	endpoint []byte
}

// encode returns the body as encoding/json would write the members
// (keys sorted, strings HTML-escaped) with "endpoint" at its sorted
// place, its bytes unchanged.
func (a *contractAnswer) encode() ([]byte, error) {
	keys := make([]string, 0, len(a.members)+1)
	for k := range a.members {
		keys = append(keys, k)
	}
	keys = append(keys, "endpoint")
	slices.Sort(keys)
	b := make([]byte, 0, len(a.endpoint)+768)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendStringHTML(b, k)
		b = append(b, ':')
		if k == "endpoint" {
			b = append(b, a.endpoint...)
			continue
		}
		mark := len(b)
		switch v := a.members[k].(type) {
		case string:
			b = jsonenc.AppendStringHTML(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case recipes.Lineage:
			b = append(b, `{"recipe_name":`...)
			b = jsonenc.AppendStringHTML(b, v.RecipeName)
			b = append(b, `,"recipe_version":`...)
			b = jsonenc.AppendStringHTML(b, v.RecipeVersion)
			b = append(b, '}')
		default:
			var ok bool
			if b, ok = jsonenc.AppendValue(b, v, true); !ok {
				raw, err := jsonv2.Marshal(v, responseJSON)
				if err != nil {
					return nil, err
				}
				b = append(b[:mark], raw...)
			}
		}
	}
	return append(b, '}'), nil
}
