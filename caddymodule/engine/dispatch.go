package engine

import (
	"fmt"
	"slices"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// request is the parsed AGTP request after framing.
type request struct {
	raw     []byte
	body    map[string]any
	hasBody bool
	caller  *policy.Caller
	idemKey string // parsed Idempotency-Key, "" when absent
}

// checkIdentifiers refuses a malformed Request-ID, Session-ID or
// Owner-ID on every AGTP request, anonymous ones (no Agent-ID)
// included, without quoting it. Under strict_identifiers a request with
// Agent-ID must carry Owner-ID and Request-ID; an anonymous one need not
// (spec §3, OP-6, OP-7, §24 item 94). An Owner-ID's registry match is
// policy.ResolveCaller's.
func (h *Engine) checkIdentifiers(x *exchange, anonymous bool) *agtp.Error {
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
	x.ownerID, x.agentOwner, x.identified, x.trustTier = a.OwnerID, a.OwnerID, true, int(a.TrustTier)
}

// person is the person an identified request acts for when that is not
// its agent's own owner (identity oauth: the token's sub), else "". What
// such a request leaves is that person's: its Idempotency-Key answers
// (fingerprint) and its retained records (INSPECT target=audit).
func (x *exchange) person() string {
	if x.identified && x.ownerID != "" && x.ownerID != x.agentOwner {
		return x.ownerID
	}
	return ""
}

func (h *Engine) setRecordAgent(x *exchange) {
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
// (redirects), step 4 (path grammar) and step 5 (method policy). Serve
// runs it on the request path, discover on a DISCOVER body target.
func (h *Engine) dispatchTo(x *exchange, path string) *agtp.Error {
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
func traceParent(r *agtp.Request) string { return r.Only("Traceparent") }

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

func (h *Engine) methodNotAllowed(x *exchange, why string) *agtp.Error {
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
