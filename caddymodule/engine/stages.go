package engine

import (
	"fmt"
	"maps"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/httpbody"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
	"go.uber.org/zap"
)

// stage is one named step of the spec §10 order. run returns the
// step's refusal (the engine answers it, the only write point of a
// refusal), or nil and whether the request goes on to the next stage
// (false: the stage answered it itself, a result or a replay). kind is
// what a request this stage answers is (the request duration's kind
// label); run may set x.kind more precisely (stageIdentity,
// stagePair).
type stage struct {
	name string
	kind requestKind
	run  func(h *Engine, x *exchange, req *request) (next bool, refusal *agtp.Error)
	// span names the stage's own span when the request is traced ("":
	// none; such a stage's costly parts start theirs).
	span string
}

// stages is the spec §10 order, a request going through them until one
// refuses or answers it.
var stages = [...]stage{
	{"task-id", kindUnrouted, stageTaskID, ""},                 // echoed on every answer: checked first
	{"singletons", kindUnrouted, stageSingletons, ""},          // single-valued headers sent once: in the head, as the native codec checks them
	{"framing", kindUnrouted, stageFraming, ""},                // step 1: framing, body limit, the JSON envelope
	{"method", kindUnrouted, stageMethod, ""},                  // step 2: lexical form, legacy opt-in, alias, catalog
	{"path", kindUnrouted, stagePath, ""},                      // steps 3-5: characters, redirects, grammar, method policy
	{"identity", kindUnrouted, stageIdentity, SpanIdentity},    // step 6: verify and resolve the caller
	{"idempotency-key", kindUnrouted, stageIdempotencyKey, ""}, // the key, read once (claimed later)
	{"built-in", kindBuiltin, stageBuiltin, ""},                // Tier A (ignores Contract-Synthesized)
	{"presentation", kindContract, stagePresentation, ""},      // step 7: a contract presented
	{"tier-b", kindTierB, stageTierB, ""},                      // step 8: a registered endpoint
	{"pair", kindUnrouted, stagePair, ""},                      // step 8b: Tier C by pair, else step 9: the gate
}

// dispatch runs x through the stages; x.kind is the kind of the stage
// that answered, and stopped its name ("" when none answered: finish
// then answers 500).
func (h *Engine) dispatch(x *exchange) (stopped string) {
	req := &request{}
	for i := range stages {
		x.kind = stages[i].kind
		var sp *stageSpan
		if x.tr != nil && stages[i].span != "" {
			sp = x.startSpan(stages[i].span)
		}
		next, e := stages[i].run(h, x, req)
		if sp != nil {
			if e != nil {
				sp.fail(e.Reason)
			}
			sp.end()
		}
		if e != nil {
			x.fail(e)
			return stages[i].name
		}
		if !next {
			return stages[i].name
		}
	}
	return ""
}

// stageTaskID refuses a malformed Task-ID header (a malformed one is
// never echoed: newExchange).
func stageTaskID(_ *Engine, x *exchange, _ *request) (bool, *agtp.Error) {
	if x.ids.badTaskID {
		return false, agtp.InvalidTaskID.New("the Task-ID header must be " + agtp.TaskIDForm)
	}
	return true, nil
}

// stageFraming is §10 step 1: an origin-form target, Content-Length
// framing within max_request_body, and the body read and decoded as
// the JSON envelope (its task_id and session_id adopted).
func stageFraming(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	r := x.in
	if strings.Contains(r.Target, "#") {
		return false, agtp.InvalidRequestLine.New("the request target must not contain '#' (api-01 §5.6)")
	}
	if !strings.HasPrefix(r.Target, "/") || r.URL == nil {
		return false, agtp.InvalidRequestLine.New("the request target must be origin-form: an absolute path with an optional query")
	}
	if r.Chunked || r.ContentLength < 0 {
		return false, agtp.ContentLengthRequired.New("AGTP messages are framed by Content-Length; chunked or unframed bodies are refused (agtp-09 §6.4.1)")
	}
	if r.ContentLength > h.MaxRequestBody {
		return false, agtp.BodyTooLarge.WithFields(fmt.Sprintf("the request body is %d bytes; the limit is %d bytes", r.ContentLength, h.MaxRequestBody), map[string]any{"limit_bytes": h.MaxRequestBody})
	}
	if r.ContentLength <= 0 {
		return true, nil
	}
	if e := agtp.CheckContentEncoding(r.Header); e != nil {
		x.failHeaders = withHeader(x.failHeaders, "Accept-Encoding", "identity")
		return false, e
	}
	raw, err := httpbody.Read(r.Body, r.ContentLength, h.MaxRequestBody)
	if err != nil {
		if l := x.agentLog("body-read-failed"); l != nil {
			l.Info("request body read failed", zap.String("agent_id", x.agentID), zap.Int("read_bytes", len(raw)),
				zap.Int64("content_length", r.ContentLength), zap.Error(err))
		}
		return false, agtp.BodyReadError(err, len(raw), r.ContentLength)
	}
	x.bodyRead = int64(len(raw)) == r.ContentLength
	if x.bodyRead {
		x.rawBody = raw
	}
	if int64(len(raw)) > h.MaxRequestBody {
		return false, agtp.BodyTooLarge.WithFields(fmt.Sprintf("the request body exceeds %d bytes", h.MaxRequestBody), map[string]any{"limit_bytes": h.MaxRequestBody})
	}
	if e := agtp.CheckContentType(r.Header["Content-Type"]); e != nil {
		return false, e
	}
	v, e := agtp.DecodeBody(raw)
	if e != nil {
		return false, e
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return false, agtp.InvalidJSON.New("the request body must be a JSON object (the AGTP envelope)")
	}
	req.raw, req.body, req.hasBody = raw, obj, true
	if bt, ok := obj["task_id"]; ok && bt != nil { // null: not given, like every envelope member
		s, isString := bt.(string)
		if !isString {
			return false, agtp.InvalidTaskID.New("the envelope task_id must be a string, not " + schema.JSONTypeName(bt))
		}
		if !agtp.ValidTaskID(s) {
			return false, agtp.InvalidTaskID.New("the envelope task_id must be " + agtp.TaskIDForm)
		}
		switch { // the Task-ID header, when sent, wins (agtp-09 §6.5.4 echoes it; OP-37)
		case x.taskID == "":
			x.taskID = s
		case x.taskID != s:
			if l := x.agentLog("task-id-disagree"); l != nil {
				l.Info("the Task-ID header and the envelope task_id disagree; the header wins (OP-37)",
					zap.String("agent_id", x.agentID), zap.String("task_id_header", textcut.Clip(x.taskID)), zap.String("task_id_envelope", textcut.Clip(s)))
			}
		}
	}
	if v, ok := obj["session_id"]; ok && v != nil {
		s, e := agtp.SessionValue(v, "the envelope session_id")
		if e != nil {
			return false, e
		}
		x.adoptSession(s, sessionFromEnvelope)
	}
	return true, nil
}

// withHeader is h with name set to value, as a new map (failHeaders
// may be shared).
func withHeader(h map[string]string, name, value string) map[string]string {
	out := make(map[string]string, len(h)+1)
	maps.Copy(out, h)
	out[name] = value
	return out
}

// stageSingletons refuses a single-valued AGTP header sent twice: the
// request is ambiguous.
func stageSingletons(_ *Engine, x *exchange, _ *request) (bool, *agtp.Error) {
	if name := agtp.RepeatedSingleton(x.in.Header); name != "" {
		return false, agtp.DuplicateHeader.New(fmt.Sprintf("the %s header appears more than once; send it once", name))
	}
	return true, nil
}

// stageMethod is §10 step 2: the method's lexical form, legacy opt-in,
// alias and catalog, and the envelope's method agreeing with it.
func stageMethod(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	r := x.in
	rm, ref := h.methods.ResolveMethod(r.Method)
	if ref != nil {
		return false, agtp.FromRefusal(ref)
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
			return false, agtp.MethodMismatch.New(fmt.Sprintf("the envelope method %s differs from the request method %s", got, rm.Method))
		}
	}
	return true, nil
}

// stagePath is §10 steps 3-5: the path's characters as sent (url.URL
// re-escapes a raw one outside the grammar, "{" or "|", into a valid
// percent-encoding), its RFC 3986 normal form (§6.2.2: every tier
// compares the same form), the query, then redirects, the path grammar
// and the method policy (dispatchTo).
func stagePath(h *Engine, x *exchange, _ *request) (bool, *agtp.Error) {
	r := x.in
	rawPath, _, _ := strings.Cut(r.Target, "?")
	if ref := policy.CheckPathCharacters(rawPath); ref != nil {
		return false, agtp.FromRefusal(ref)
	}
	path, err := policy.NormalizePath(r.URL.EscapedPath())
	if err != nil {
		return false, agtp.InvalidPathEncoding.New("the request path's percent-encoding is invalid: " + err.Error())
	}
	if x.query, err = agtp.ParseQuery(r.URL.RawQuery); err != nil {
		return false, agtp.InvalidQuery.New(err.Error())
	}
	x.requestPath = path
	if e := h.dispatchTo(x, path); e != nil {
		return false, e
	}
	return true, nil
}

// stageIdentity is §10 step 6: without Agent-ID only the manifest and
// the read-only built-ins are served (spec §8.1); with one, it is
// proved by the identity step (verifyIdentity, or the identity the
// door verified), its identifiers checked and the caller resolved in
// the registry with its scope claim.
func stageIdentity(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	r := x.in
	if h.Identity == IdentityHeader && !x.in.Loopback {
		return false, agtp.IdentityModeRefused.New("this gateway trusts the Agent-ID header only on loopback; configure a verified identity mode")
	}
	if !r.Has("Agent-ID") && x.in.Verified == nil && !h.bearerSent(r) {
		// The identifiers of an anonymous request are checked as any
		// other's: they are echoed and go into its Attribution-Record.
		if e := h.checkIdentifiers(x, true); e != nil {
			return false, e
		}
		if x.method != "DISCOVER" {
			return false, agtp.AgentUnauthenticated.New(h.credentialHint())
		}
		if !h.anonymousDiscovery() {
			return false, agtp.AnonymousDiscoveryDisabled.WithFields("this server does not answer DISCOVER without an Agent-ID", map[string]any{"type": "anonymous-discovery-disabled"})
		}
		x.kind = kindBuiltin
		if !h.discover(x, req) {
			x.kind = kindUnrouted
			// Identity (§10 step 6) comes before the match (steps
			// 8–9): without Agent-ID only the manifest and the
			// read-only built-ins are served (spec §8.1).
			return false, agtp.AgentUnauthenticated.New(fmt.Sprintf("%s %s needs an Agent-ID header; without one this server answers only DISCOVER / (the manifest) and the built-ins %s",
				x.method, x.path, anonymousBuiltins))
		}
		return false, nil
	}
	if r.Has("Agent-ID") && !x.agentIDValid {
		// Malformed is 400 whatever the identity mode (spec §3): a
		// signature cannot name an agent the ID cannot be.
		return false, agtp.InvalidCanonicalID.New("Agent-ID is not a canonical Agent-ID (64 lowercase hexadecimal characters).")
	}
	id := x.in.Verified
	if id != nil {
		// The door verified the transport (the MCP door, the HTTP
		// request that carries a tool call); the request names that
		// identity or none.
		if x.agentID != "" && x.agentID != id.AgentID {
			return false, agtp.AgentUnauthenticated.New("the Agent-ID differs from the identity the transport verified")
		}
	} else {
		var e *agtp.Error
		if id, e = h.VerifyTransport(x.in, req.raw, x.agentID); e != nil {
			if l := x.agentLog(e.Reason); l != nil {
				l.Info("identity refused", zap.String("agent_id", textcut.Clip(x.agentID)), zap.String("mode", h.Identity), zap.String("reason", e.Reason))
			}
			return false, e
		}
	}
	x.ident = id
	if x.agentID == "" {
		// A bearer token named the agent.
		x.agentID, x.agentIDValid = id.AgentID, true
	}
	if x.recordAgent == "" { // not already set from the header (ServeHTTP)
		h.setRecordAgent(x)
	}
	if e := h.checkIdentifiers(x, false); e != nil {
		return false, e
	}
	ownerClaim := x.ownerClaim
	if id.OwnerID != "" {
		// The token's principal is the Owner-ID; a claimed one must
		// name it (the registry's owner is not the principal here).
		if ownerClaim != "" && ownerClaim != id.OwnerID {
			return false, agtp.OwnerMismatch.New("the Owner-ID differs from the principal (sub) of the access token")
		}
		ownerClaim = ""
	}
	scopeHdr, scopePresent := r.Value("Authority-Scope")
	caller, ref := policy.ResolveCaller(h.agents, x.agentID, ownerClaim, scopeHdr, scopePresent)
	if caller != nil {
		// Identified, also when only the scope claim is refused
		// (scope-claim-invalid). A claimed Owner-ID equals the
		// registry's (ResolveCaller) or the token's principal.
		x.identifiedAs(caller.Agent)
		if id.OwnerID != "" {
			x.ownerID = id.OwnerID
		}
		if id.Bounded {
			caller.Bounded = true
			caller.Ceiling, _ = policy.ParseScopes(id.Scopes) // mapped from valid tokens
			if ref == nil {
				ref = caller.BoundRefusal()
			}
		}
	}
	if ref != nil {
		return false, agtp.FromRefusal(ref)
	}
	req.caller = caller
	return true, nil
}

// credentialHint says what an unidentified request lacks: an Agent-ID
// header (with its mode's proof), or under identity oauth an access
// token, or either.
func (h *Engine) credentialHint() string {
	switch {
	case h.oauth == nil:
		return "this request needs an Agent-ID header"
	case h.Identity == IdentityOAuth:
		return "this request needs an OAuth access token: send Authorization: Bearer <token> (identity oauth; docs/agent-guide-mcp.md)"
	}
	return "this request needs an OAuth access token (Authorization: Bearer <token>) or an Agent-ID header with the proof its identity mode asks for"
}

// bearerSent reports whether r carries Authorization: Bearer and
// identity oauth is on: the token, not an Agent-ID header, may name the
// agent.
func (h *Engine) bearerSent(r *agtp.Request) bool {
	if h.oauth == nil {
		return false
	}
	_, has, e := bearer(r)
	return has || e != nil
}

// stageIdempotencyKey reads the request's Idempotency-Key (or its
// alias), claimed later where the request is about to execute, and
// counts the keyed request as running until Serve returns; while
// a previous configuration's keyed requests run with their keys
// elsewhere (State.SwitchStore), it answers 503 store-unavailable.
func stageIdempotencyKey(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	key, e := idempotencyKeyOf(x.in)
	if e != nil {
		return false, e
	}
	if key != "" && x.keyedRun == nil {
		r, err := h.enterKeyed()
		if err != nil {
			h.storeFailed(x, err)
			return false, nil
		}
		x.keyedRun = r
	}
	req.idemKey = key
	return true, nil
}

// stageBuiltin serves the Tier A built-ins, which ignore
// Contract-Synthesized: DISCOVER, and PROPOSE, INSPECT, REVOKE and
// SUSPEND on "/".
func stageBuiltin(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	switch x.method {
	case "DISCOVER":
		if h.discover(x, req) {
			return false, nil
		}
	case "PROPOSE", "INSPECT", "REVOKE", "SUSPEND":
		if x.path == "/" {
			x.traceTemplate("/")
			h.builtin(x, req)
			return false, nil
		}
	}
	return true, nil
}

// stagePresentation is §10 step 7: a request presenting a contract
// (Contract-Synthesized or Synthesis-Id) runs under it, or is refused;
// no synthesis starts.
func stagePresentation(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	id, presented, e := presentedContract(x.in)
	if e != nil {
		return false, e
	}
	if !presented {
		return true, nil
	}
	h.present(x, req, id)
	return false, nil
}

// stageTierB is §10 step 8: a registered Tier B endpoint.
func stageTierB(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	ep, params, ok := h.set.Route(x.method, x.path)
	if !ok {
		return true, nil
	}
	x.traceTemplate(ep.Path)
	h.invokeEndpoint(x, req, ep, params)
	return false, nil
}

// stagePair is §10 step 8b, Tier C by pair, looked up with the claim of
// the request's key in one store call (the claim the contract's run,
// once its scope header check passed, or the gate, once locks 1-2 are
// open, takes), and else step 9: the gate for an unregistered pair.
func stagePair(h *Engine, x *exchange, req *request) (bool, *agtp.Error) {
	caller := req.caller
	_, gateProceeds, ref := h.gate.Locks12(policy.AllowRCNS(x.in.Get("Allow-RCNS")))
	pr := store.PairRequest{AgentID: caller.Agent.ID, Method: x.method, Path: x.path, Key: req.idemKey,
		ClaimIfFound: !h.scopeRequired() || caller.ScopeHeader, ClaimIfMissing: ref == nil && gateProceeds}
	if req.idemKey != "" {
		pr.Fingerprint, pr.Holder = x.fingerprint(req), x.holder()
		h.awaitSettling(x, caller.Agent.ID, req.idemKey)
	}
	pr.Spend, pr.Attempt, pr.Mint = h.gateMiss(x, req)
	pr.MintMode = h.Mode
	sp := x.startSpan(SpanPair)
	res, err := h.sto.Presenter.ResolvePair(x.ctx(), pr)
	sp.end()
	if err != nil {
		h.storeFailed(x, err)
		return false, nil
	}
	x.preclaimed, x.prepaid = res.Claimed, res.Spent
	if res.AttemptKept {
		x.keptAttempt = pr.Attempt
	}
	if res.Minted != nil {
		x.premint, x.premintC = res.Minted, pr.Mint
	}
	if res.Contract != nil {
		x.kind = kindContract
		h.runContract(x, req, res.Contract, viaPair)
		return false, nil
	}
	x.kind = kindGate
	gs := x.startSpan(SpanGate)
	h.gateway(x, req)
	gs.end()
	return false, nil
}
