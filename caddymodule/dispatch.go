package caddymodule

import (
	"fmt"
	"slices"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/httpbody"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"go.uber.org/zap"
)

// request is the parsed AGTP request after framing.
type request struct {
	raw     []byte
	body    map[string]any
	hasBody bool
	caller  *policy.Caller
	idemKey string // parsed Idempotency-Key, "" when absent
}

func (h *engine) dispatch(x *exchange) {
	r := x.in
	// The Task-ID header is echoed on every answer, refusals included:
	// checked first, and a malformed one is never echoed (newExchange).
	if x.ids.badTaskID {
		x.fail(agtp.InvalidTaskID.New("the Task-ID header must be " + agtp.TaskIDForm))
		return
	}
	// §10 step 1: framing and body limit.
	if strings.Contains(r.Target, "#") {
		x.fail(agtp.InvalidRequestLine.New("the request target must not contain '#' (api-01 §5.6)"))
		return
	}
	if !strings.HasPrefix(r.Target, "/") || r.URL == nil {
		x.fail(agtp.InvalidRequestLine.New("the request target must be origin-form: an absolute path with an optional query"))
		return
	}
	if r.Chunked || r.ContentLength < 0 {
		x.fail(agtp.ContentLengthRequired.New("AGTP messages are framed by Content-Length; chunked or unframed bodies are refused (agtp-09 §6.4.1)"))
		return
	}
	if r.ContentLength > h.MaxRequestBody {
		x.fail(agtp.BodyTooLarge.WithFields(fmt.Sprintf("the request body is %d bytes; the limit is %d bytes", r.ContentLength, h.MaxRequestBody), map[string]any{"limit_bytes": h.MaxRequestBody}))
		return
	}
	req := &request{}
	if r.ContentLength > 0 {
		if e := agtp.CheckContentEncoding(r.Header); e != nil {
			x.failWith(e, map[string]string{"Accept-Encoding": "identity"})
			return
		}
		raw, err := httpbody.Read(r.Body, r.ContentLength, h.MaxRequestBody)
		if err != nil {
			h.logger.Info("request body read failed", zap.String("agent_id", x.agentID), zap.Int("read_bytes", len(raw)),
				zap.Int64("content_length", r.ContentLength), zap.Error(err))
			x.fail(agtp.BodyReadError(err, len(raw), r.ContentLength))
			return
		}
		x.bodyRead = int64(len(raw)) == r.ContentLength
		if x.bodyRead {
			x.rawBody = raw
		}
		if int64(len(raw)) > h.MaxRequestBody {
			x.fail(agtp.BodyTooLarge.WithFields(fmt.Sprintf("the request body exceeds %d bytes", h.MaxRequestBody), map[string]any{"limit_bytes": h.MaxRequestBody}))
			return
		}
		if e := agtp.CheckContentType(r.Header["Content-Type"]); e != nil {
			x.fail(e)
			return
		}
		v, e := agtp.DecodeBody(raw)
		if e != nil {
			x.fail(e)
			return
		}
		obj, ok := v.(map[string]any)
		if !ok {
			x.fail(agtp.InvalidJSON.New("the request body must be a JSON object (the AGTP envelope)"))
			return
		}
		req.raw, req.body, req.hasBody = raw, obj, true
		if bt, ok := obj["task_id"]; ok && bt != nil { // null: not given, like every envelope member
			s, isString := bt.(string)
			if !isString {
				x.fail(agtp.InvalidTaskID.New("the envelope task_id must be a string, not " + schema.JSONTypeName(bt)))
				return
			}
			if !agtp.ValidTaskID(s) {
				x.fail(agtp.InvalidTaskID.New("the envelope task_id must be " + agtp.TaskIDForm))
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
			s, e := agtp.SessionValue(v, "the envelope session_id")
			if e != nil {
				x.fail(e)
				return
			}
			x.adoptSession(s, sessionFromEnvelope)
		}
	}

	// Single-valued AGTP headers sent twice make the request ambiguous.
	if name := agtp.RepeatedSingleton(r.Header); name != "" {
		x.fail(agtp.DuplicateHeader.New(fmt.Sprintf("the %s header appears more than once; send it once", name)))
		return
	}

	// §10 step 2: method lexical form, legacy opt-in, alias, catalog.
	rm, ref := h.methods.ResolveMethod(r.Method)
	if ref != nil {
		x.fail(agtp.FromRefusal(ref))
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
			x.fail(agtp.MethodMismatch.New(fmt.Sprintf("the envelope method %s differs from the request method %s", got, rm.Method)))
			return
		}
	}
	// The path's characters as sent: url.URL re-escapes a raw one
	// outside the grammar ("{", "|"…) into a valid percent-encoding.
	rawPath, _, _ := strings.Cut(r.Target, "?")
	if ref := policy.CheckPathCharacters(rawPath); ref != nil {
		x.fail(agtp.FromRefusal(ref))
		return
	}
	// §10 step 3: redirects, on the normalized path (RFC 3986 §6.2.2:
	// every tier compares the same form).
	path, err := policy.NormalizePath(r.URL.EscapedPath())
	if err != nil {
		x.fail(agtp.InvalidPathEncoding.New("the request path's percent-encoding is invalid: " + err.Error()))
		return
	}
	if x.query, err = agtp.ParseQuery(r.URL.RawQuery); err != nil {
		x.fail(agtp.InvalidQuery.New(err.Error()))
		return
	}
	x.requestPath = path
	if e := h.dispatchTo(x, path); e != nil {
		x.fail(e)
		return
	}
	// §10 step 6: identity.
	if h.Identity == IdentityHeader && !x.in.Loopback {
		x.fail(agtp.IdentityModeRefused.New("this gateway trusts the Agent-ID header only on loopback; configure a verified identity mode"))
		return
	}
	if !r.Has("Agent-ID") {
		// The identifiers of an anonymous request are checked as any
		// other's: they are echoed and go into its Attribution-Record.
		if e := h.checkIdentifiers(x, true); e != nil {
			x.fail(e)
			return
		}
		if x.method == "DISCOVER" {
			if !h.anonymousDiscovery() {
				x.fail(agtp.AnonymousDiscoveryDisabled.WithFields("this server does not answer DISCOVER without an Agent-ID", map[string]any{"type": "anonymous-discovery-disabled"}))
				return
			}
			if !h.discover(x, req) {
				// Identity (§10 step 6) comes before the match (steps
				// 8–9): without Agent-ID only the manifest and the
				// read-only built-ins are served (spec §8.1).
				x.fail(agtp.AgentUnauthenticated.New(fmt.Sprintf("%s %s needs an Agent-ID header; without one this server answers only DISCOVER / (the manifest) and the built-ins %s",
					x.method, x.path, anonymousBuiltins)))
			}
			return
		}
		x.fail(agtp.AgentUnauthenticated.New("this request needs an Agent-ID header"))
		return
	}
	if !x.agentIDValid {
		// Malformed is 400 whatever the identity mode (spec §3): a
		// signature cannot name an agent the ID cannot be.
		x.fail(agtp.InvalidCanonicalID.New("Agent-ID is not a canonical Agent-ID (64 lowercase hexadecimal characters)."))
		return
	}
	if v := x.in.Verified; v != nil {
		// The door verified the transport (the MCP door, the HTTP
		// request that carries a tool call); the request names that
		// identity or none.
		if x.agentID != v.AgentID {
			x.fail(agtp.AgentUnauthenticated.New("the Agent-ID differs from the identity the transport verified"))
			return
		}
	} else if e := h.verifyIdentity(x, req); e != nil {
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
	scopeHdr, scopePresent := r.Value("Authority-Scope")
	caller, ref := policy.ResolveCaller(h.agents, x.agentID, x.ownerClaim, scopeHdr, scopePresent)
	if caller != nil {
		// Identified, also when only the scope claim is refused
		// (scope-claim-invalid). A claimed Owner-ID equals the
		// registry's (ResolveCaller).
		x.identifiedAs(caller.Agent)
	}
	if ref != nil {
		x.fail(agtp.FromRefusal(ref))
		return
	}
	req.caller = caller
	key, e := idempotencyKeyOf(r)
	if e != nil {
		x.fail(e)
		return
	}
	req.idemKey = key

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
	// §10 step 8b: Tier C by pair, looked up with the claim of its key
	// in one store call: the claim the contract's run (its scope header
	// check passed) or the gate (locks 1-2 open) takes.
	_, gateProceeds, ref := h.gate.Locks12(policy.AllowRCNS(x.in.Get("Allow-RCNS")))
	pr := store.PairRequest{AgentID: caller.Agent.ID, Method: x.method, Path: x.path, Key: req.idemKey, Holder: x.holder(),
		ClaimIfFound: !h.scopeRequired() || caller.ScopeHeader, ClaimIfMissing: ref == nil && gateProceeds}
	if req.idemKey != "" {
		pr.Fingerprint = x.fingerprint(req)
	}
	res, err := h.sto.Presenter.ResolvePair(x.ctx(), pr)
	if err != nil {
		h.storeFailed(x, err)
		return
	}
	x.preclaimed = res.Claimed
	if res.Contract != nil {
		h.runContract(x, req, res.Contract, viaPair)
		return
	}
	// §10 step 9: unregistered pair.
	h.gateway(x, req)
}

// checkIdentifiers refuses a malformed Request-ID, Session-ID or
// Owner-ID on every AGTP request, anonymous ones (no Agent-ID)
// included, without quoting it. Under strict_identifiers a request with
// Agent-ID must carry Owner-ID and Request-ID; an anonymous one need not
// (spec §3, OP-6, OP-7, §24 item 94). An Owner-ID's registry match is
// policy.ResolveCaller's.
func (h *engine) checkIdentifiers(x *exchange, anonymous bool) *agtp.Error {
	switch {
	case x.ids.badRequestID:
		return agtp.InvalidRequestID.New("Request-ID must be a lowercase UUIDv7 or a ULID")
	case x.ids.badSessionID:
		return agtp.InvalidSessionID.New("Session-ID must be " + agtp.SessionIDForm)
	case x.ids.badOwnerID:
		return agtp.InvalidOwnerID.New("Owner-ID is not 1 to 256 characters of letters, digits, '-', '_', ':' and '.'")
	}
	if anonymous || !h.StrictIdentifiers {
		return nil
	}
	if !x.ids.ownerIDSent {
		return agtp.OwnerIDRequired.New("this server requires Owner-ID with Agent-ID (strict_identifiers)")
	}
	if !x.ids.requestIDSent {
		return agtp.RequestIDRequired.New("this server requires Request-ID with Agent-ID (strict_identifiers)")
	}
	return nil
}

// setRecordAgent makes x's Agent-ID, when it is a registered one, the
// Attribution-Record's agent_id and chain key, and that agent's
// registry owner its owner_id (ids-02 §8.2: owner_id goes with
// agent_id); else it leaves both "" (chained as an anonymous request:
// spec §16.2 wants 64 lowercase hex, and no request may add a chain key
// of its own choosing, nor have a claimed owner stated for it).
// identifiedAs marks x as answering the identified agent a (spec §10
// step 6 accepted it): its answers name a's owner, trust tier and the
// verification path (spec §4; cases/02).
func (x *exchange) identifiedAs(a *policy.Agent) {
	x.ownerID, x.identified, x.trustTier = a.OwnerID, true, int(a.TrustTier)
}

func (h *engine) setRecordAgent(x *exchange) {
	if !x.agentIDValid {
		return
	}
	a, ok := h.agents.Lookup(x.agentID)
	if !ok {
		return
	}
	x.recordAgent, x.ownerID = x.agentID, a.OwnerID
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

// dispatchTo makes the normalized path the exchange's pair: §10 step 3
// (redirects), step 4 (path grammar) and step 5 (method policy). serve
// runs it on the request path, discover on a DISCOVER body target.
func (h *engine) dispatchTo(x *exchange, path string) *agtp.Error {
	x.method, x.path = h.methods.ApplyRedirects(x.method, path)
	if ref := h.methods.CheckPath(x.path); ref != nil {
		return agtp.FromRefusal(ref)
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
// agtp.CanonicalQuery. "/%72oom?" and "/room" are one target; so are
// "?b=2&a=1" and "?a=0&a=1&b=2".
func (x *exchange) fingerprintTarget() string {
	if q := agtp.CanonicalQuery(x.query); q != "" {
		return x.requestPath + "?" + q
	}
	return x.requestPath
}

// traceParent is the request's traceparent field when it has exactly
// one (W3C Trace Context §3.2: several make it invalid), else "";
// recipes.WithTraceParent forwards it only when valid.
func traceParent(r *agtp.Request) string {
	if v := r.Header["Traceparent"]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// presentedContract reads Contract-Synthesized and its alias
// Synthesis-Id (spec §13.5, OP-3).
func presentedContract(r *agtp.Request) (string, bool, *agtp.Error) {
	cs, okCS := r.Value("Contract-Synthesized")
	si, okSI := r.Value("Synthesis-Id")
	if !okCS && !okSI {
		return "", false, nil
	}
	if okCS && okSI && cs != si {
		return "", false, agtp.AmbiguousContract.New("Contract-Synthesized and Synthesis-Id name different contracts")
	}
	id := cs
	if !okCS {
		id = si
	}
	if !recipes.ValidSynthesisID(id) {
		return "", false, agtp.InvalidSynthesisID.New("a synthesis id is 1-128 characters of A-Z a-z 0-9 . _ ~ -")
	}
	return id, true, nil
}

func (h *engine) methodNotAllowed(x *exchange, why string) *agtp.Error {
	allowed := []string{}
	for _, m := range h.set.MethodsForPath(x.path) {
		if !h.methods.Disallowed(m) {
			allowed = append(allowed, m)
		}
	}
	return agtp.MethodNotAllowed.WithFields(why, map[string]any{"allowed_methods_for_path": allowed, "redirects_for_path": h.methods.RedirectsFor(x.path)})
}

var envelopeKeys = map[string]bool{"method": true, "task_id": true, "session_id": true, "parameters": true, "context": true}

// textConverter converts an input's query and path values (text) to
// the types its input_schema declares: *recipes.Endpoint for Tier B,
// *recipes.Recipe for the gate and contracts.
type textConverter interface {
	ConvertText(in map[string]any, textKeys []string) *recipes.Failure
}

// input assembles an invocation's input (spec OP-32, api-01 §5.5):
// envelope parameters, plus query parameters (body wins; a repeated
// query key keeps its last value, spec §2.1), plus template parameters
// (a different body value is an error). The query and path values,
// text on the wire, are then converted by conv to the boolean, integer
// or number type the input_schema declares (a value that does not
// convert is 422 invalid-input naming the parameter), on every door.
func (x *exchange) input(req *request, params map[string]string, conv textConverter) (map[string]any, *agtp.Error) {
	// The answer names the least unknown field, so it does not vary
	// with map iteration (and nothing is allocated when all are known).
	unknown, found := "", false
	for k := range req.body {
		if !envelopeKeys[k] && (!found || k < unknown) {
			unknown, found = k, true
		}
	}
	if found {
		return nil, agtp.InvalidEnvelope.New(fmt.Sprintf("unknown envelope field %q; put the input under \"parameters\"", textcut.Clip(unknown)))
	}
	in, e := envelopeParameters(req)
	if e != nil {
		return nil, e
	}
	var text []string // the keys whose value is text from the query or path
	for k := range x.query {
		if _, inBody := in[k]; !inBody {
			in[k], _ = agtp.QueryValue(x.query, k)
			text = append(text, k)
		}
	}
	for k, v := range params {
		if bv, ok := in[k]; ok {
			if s, isStr := bv.(string); !isStr || s != v {
				return nil, agtp.ParameterConflict.New(fmt.Sprintf("parameter %q is given by the path as %q and differently in the request", textcut.Clip(k), textcut.Clip(v)))
			}
		}
		in[k] = v
		text = append(text, k)
	}
	if len(text) > 0 {
		slices.Sort(text) // the first failure named does not vary
		if f := conv.ConvertText(in, text); f != nil {
			return nil, failureError(f)
		}
	}
	return in, nil
}
