// Package engine is the gateway's request engine, caddy-free: the spec
// §10 order as named stages (stages.go) over the transport-neutral
// agtp.Request, with the identity verifiers, the Tier A built-ins,
// contracts, the RCNS gate, rate limits, Idempotency-Key leases,
// Attribution-Records and the manifest. A host (the Caddy module, or a
// test) builds it with New and Attach and hands it requests with Serve;
// the doors (caddymodule/httpdoor, caddymodule/mcpdoor, the native
// AGTP/1.0 door) only frame. docs/architecture.md has the request walk.
package engine

import (
	"context"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Engine is the gateway's one request engine: the spec §10 stages over
// the transport-neutral agtp.Request, with the state, limits, contracts
// and record chains that every door of one rcns name shares. Each door
// (the HTTP binding, the native AGTP/1.0 listener, MCP) only turns its
// framing into an agtp.Request and the agtp.Response back into bytes.
// New builds it and Attach gives it its store; its Config is the
// host's configuration (defaults applied), read-only from then on. An
// Engine is safe for concurrent use by any number of doors.
type Engine struct {
	*Config

	logger *zap.Logger
	// logBudget bounds the lines an agent's own requests cause
	// (AgentLog).
	logBudget *logBudget
	methods   *policy.MethodPolicy
	agents    *policy.Registry
	set       *recipes.Set
	upstreams map[string]*recipes.Upstream
	// credPolicies is each declared upstream's credential policy
	// (CredentialsConfig), built at each load.
	credPolicies map[string]upstreamauth.Policy
	gate         policy.Gate
	st           *State
	passthru     map[string]bool
	metrics      *metrics
	idents       *identities
	// oauth is identity oauth's verifier (nil when the modes do not
	// name oauth); it outlives document reloads (its caches).
	oauth *oauthVerifier
	// trustsHeader: the identity modes name header (TrustsHeader).
	trustsHeader bool
	// idSteps is the identity step: the verifiers asked in order
	// (verifyTransport).
	idSteps []verifier
	events  EventSink
	// storeAt is where this engine keeps its Idempotency-Keys and its
	// configuration load (State.SwitchStore), set before it serves.
	storeAt engineStore
	clock   func() time.Time
	nodeID  string
	hosted  []map[string]any
	dataDir string
	signer  *records.Signer
	// recDir and recFsync are the resolved records_dir ("" memory-only)
	// and fsync policy, opened on the first request (act).
	recDir   string
	recFsync records.FsyncPolicy
	act      *activation
	// published is the current manifest, its ETag and AGTP-API-Version;
	// replaced when a persistent synthesis changes the manifest.
	pub *manifestHolder
	// sto is the state every door shares (store memory or store
	// redis); gateRL and invokeRL are its budgets (invokeRL nil when
	// the invocation budget is off).
	sto      store.Set
	gateRL   store.Limiter
	invokeRL store.Limiter
	// mem is the name's memory store (store memory), else nil; shared
	// the health of store redis, else nil; restorer binds contracts'
	// captured plans to this configuration (bind), and restores them
	// from store redis.
	mem      *store.Memory
	shared   SharedStore
	restorer *recipes.Restorer
	// seal is the shared store's seal key once read (sealkey.go).
	seal sealHolder
}

// Serve answers one AGTP request from any door, in the order of spec
// §10 (stages.go names the stages); it always returns an answer, a
// refusal in the body of spec §19 included. ctx is the request's
// context (it replaces r.Context; nil keeps r.Context): its deadline
// and cancellation bound the upstream calls. Serve reads r.Body within the
// body limits and never closes it; the door owns the connection.
func (h *Engine) Serve(ctx context.Context, r *agtp.Request) *agtp.Response {
	start := time.Now()
	if ctx != nil {
		r.Context = ctx
	}
	if p := h.shared; p != nil {
		p.Enter()
		defer p.Exit()
	}
	h.Activate()
	var sp trace.Span
	r.Context, sp = startRequestSpan(r.Context)
	x := h.newExchange(r)
	returned := false
	// Three deferred calls, not one: each runs even when one run before
	// it panics (a second defect, say in the release's store call), so
	// neither the renewer nor the keyed-run count outlives the request.
	defer func() {
		// Stopped by the answer's write; after a panic (a defect) the
		// claim would otherwise be renewed for as long as the process
		// lives: its lease now ends as a stopped node's does (409
		// outcome-unknown after it).
		x.renewer.stop()
	}()
	defer func() {
		if x.keyedRun != nil {
			h.exitKeyed(x.keyedRun)
		}
	}()
	defer func() {
		if !returned {
			// A panic (a defect) is unwinding through Serve; it goes on
			// unrecovered, its stack intact, to the door's server.
			h.releaseUnrun(x)
		}
	}()
	if sp != nil {
		x.tr = &exchangeTrace{span: sp, ctx: r.Context}
	}
	h.dispatch(x)
	resp := h.finish(x, start)
	x.endRequestSpan()
	returned = true
	return resp
}

// releaseUnrun releases the Idempotency-Key claim of x when a panic
// unwinds through Serve before x reached execution and before its
// answer settled the claim (a panic in the answer's own write before
// that, say in its negotiation record, counts as before): nothing ran,
// as for a refusal, so the key comes free for the agent's retry at
// once. Without it the claim stayed until its lease ended and the key
// then answered 409 outcome-unknown for the rest of its window, asking
// an operator to settle a request that never ran. A request that
// reached execution keeps its claim: what it did is unknown, and its
// lease ends as a stopped node's does (Serve stops the renewer). A
// panic in the release itself is logged and recovered there
// (TestPanicInReleaseStillEndsRun).
func (h *Engine) releaseUnrun(x *exchange) {
	if x.claimSettled || x.executed {
		return // the answer settled the claim, or the request may have run
	}
	cl := x.claim
	if cl == nil && x.preclaimed != nil {
		cl = x.preclaimed.Claim
	}
	if cl == nil {
		return
	}
	x.claim, x.preclaimed = nil, nil
	x.renewer.stop()
	log := x.log().With(zap.String("agent_id", x.agentID))
	log.Error("a request panicked before it ran anything; releasing its Idempotency-Key claim")
	// A second panic in the release is logged and stopped here, so the
	// request's own panic goes on to the door's server, its value and
	// stack intact, instead of being replaced by this one.
	defer recovered.Guard(log, "panic releasing the Idempotency-Key claim of a request that panicked; the key is left to its lease")
	releaser(h, cl, context.WithoutCancel(x.ctx()), log)()
}

// newExchange is the exchange of r with its identifiers read and
// checked: Agent-ID, Task-ID, Request-ID, Owner-ID and Session-ID, each
// kept for the echo and the Attribution-Record only when well formed
// and sent once (a repeated one is refused, stageSingletons, and not
// echoed, as the native door drops it).
func (h *Engine) newExchange(r *agtp.Request) *exchange {
	x := &exchange{h: h, in: r,
		agentID: r.Only("Agent-ID"),
		taskID:  r.Only("Task-ID"),
	}
	x.agentIDValid = policy.ValidAgentID(x.agentID)
	// Each identifier is checked once, here. A malformed one is refused
	// (checkIdentifiers reads the verdicts) and is never echoed or
	// written into an Attribution-Record: the record names a request id
	// the gateway minted instead, as for a request without one.
	rid, ridSent := r.Value("Request-ID")
	oid, oidSent := r.Value("Owner-ID")
	sid, sidSent := r.Value("Session-ID")
	x.ids = identifiers{requestIDSent: ridSent, ownerIDSent: oidSent,
		badRequestID: ridSent && !agtp.ValidRequestID(rid),
		badOwnerID:   oidSent && !policy.ValidOwnerID(oid),
		badSessionID: sidSent && !agtp.ValidSessionID(sid)}
	// A malformed Task-ID is never echoed (dispatch refuses it first);
	// a repeated one is left to stageSingletons.
	if len(r.Header[agtp.CanonicalKey("Task-ID")]) == 1 && !agtp.ValidTaskID(x.taskID) {
		x.taskID, x.ids.badTaskID = "", true
	}
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
	// (OP-22). In a verified mode it does so only once verified (Serve).
	if h.Identity == IdentityHeader {
		if r.Loopback {
			h.setRecordAgent(x)
		}
	}
	if x.sessionID != "" {
		x.sessionFrom = sessionFromHeader
	}
	return x
}

// finish counts the answer of x, and the time since start (when the
// engine received it) by what answered it, and returns it.
func (h *Engine) finish(x *exchange, start time.Time) *agtp.Response {
	r := x.in
	if !x.written {
		// Every path of Serve answers; this is the net under a new one
		// that forgets to, so an AGTP request never gets an empty 200
		// without the AGTP response headers.
		x.log().Error("no answer written for an AGTP request", zap.String("agent_id", x.agentID),
			zap.String("method", x.method), zap.String("path", x.path))
		x.fail(agtp.InternalError.New("the gateway reached no answer for this request"))
	}
	m := x.method
	if m == "" {
		m = r.Method
	}
	h.metrics.request(m, x.status, r.Binding)
	h.noteRefusal(x)
	h.metrics.requestDuration(r.Binding, x.kind, x.status, x.reason, time.Since(start).Seconds())
	x.resp.RequestID, x.resp.Reason = x.requestID, x.reason
	return x.resp
}

// Answer is the AGTP error Answer to a request a door refused before
// the engine could read it (bad framing on the native door): e with
// every AGTP response header, in the body of spec §19. The identifiers
// of r.Header (what of the head the door could read, possibly none)
// are echoed as on any other refusal: a malformed one is not.
func (h *Engine) Answer(r *agtp.Request, e *agtp.Error) *agtp.Response {
	return h.Refuse(r, e, Refusal{})
}
