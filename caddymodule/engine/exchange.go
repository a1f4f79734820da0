package engine

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/policy/ratelimit"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
)

// exchange is one AGTP request in flight: what the response headers and
// the Attribution-Record need.
type exchange struct {
	h  *Engine
	in *agtp.Request
	// resp is the answer, set once by writeRaw.
	resp  *agtp.Response
	query url.Values // the request query, parsed and checked once (agtp.ParseQuery)
	// keyedRun counts this keyed request as running (Engine.enterKeyed);
	// Serve ends it (exitKeyed). Nil for a request without a key.
	keyedRun *keyedRun
	// presentedID is the synthesis id of the contract a keyed request
	// presents (Contract-Synthesized, §10 step 7), "" otherwise; and
	// presentedPending whether the presented contract was still pending
	// (a 461 not yet accepted) when presented. claim checks the key's
	// stored answer against them (ClaimConfirming); runContract accepts
	// a pending one.
	presentedID      string
	presentedPending bool
	// fence is when the leases on the contracts this request ended (or
	// found ended) have run out on every node (endContract sets it,
	// afterEnding waits for it before the answer); zero when it ended
	// none or the store keeps no leases (store.LeaseFence).
	fence     time.Time
	taskID    string
	requestID string
	// requestIDEcho: requestID is the request's own well-formed
	// Request-ID, echoed on the answer (not one the gateway minted).
	requestIDEcho bool
	agentID       string // verbatim header value
	agentIDValid  bool   // agentID is 64 lowercase hex (echoed only then)
	// ident is the identity the identity step verified (nil before it,
	// and for anonymous requests): how, and for OAuth the principal,
	// issuer and client.
	ident *agtp.Identity
	// recordAgent is agentID once the identity mode accepted it (at
	// once under identity header on loopback, else once verified) and
	// the registry knows it: the Attribution-Record's agent_id and chain
	// key ("" until then, as for an anonymous request).
	recordAgent string
	ids         identifiers // which identifier headers came, and which are malformed
	// ownerClaim is a well-formed Owner-ID header value, checked against
	// the registry at §10 step 6. ownerID is the owner the
	// Attribution-Record states: the registry owner of recordAgent (set
	// with it), or, on an anonymous request (no Agent-ID), the claim
	// itself. A request naming an Agent-ID the gateway does not record
	// (unknown, malformed, unverified) never gets a record stating the
	// owner it claimed, nor does an owner-mismatch refusal.
	ownerClaim string
	ownerID    string
	// agentOwner is the registry owner of the identified agent; ownerID
	// differs from it when the request acts for a person (person).
	agentOwner string
	// identified: §10 step 6 accepted the caller (verified and
	// registered); trustTier is its trust tier. The answer then says
	// who the gateway took it to be (Owner-ID, Trust-Tier,
	// Verification-Path).
	identified bool
	trustTier  int
	sessionID  string
	requested  string // wire method when an alias applied
	method     string // dispatched method
	path       string // dispatched path
	// requestPath is the request path in RFC 3986 normal form, before
	// redirects (the Idempotency-Key fingerprint's).
	requestPath string
	catalogWrn  string
	// sessionFrom says where sessionID, the request's session, came
	// from: the Session-ID header, else the body (adoptSession).
	sessionFrom string
	// failHeaders are extra headers for an error answer (e.g.
	// AGTP-Endpoint-Warning on a deprecated endpoint's failure).
	failHeaders map[string]string
	// failFields are extra top-level fields for every error answer
	// (PROPOSE: proposed_method and proposed_path, once the proposal is
	// read); a refusal's own Fields win over them.
	failFields map[string]any
	// rateHeaders are the RateLimit fields of the budget that applied;
	// they go on every later answer.
	rateHeaders map[string]string
	// claim is the Idempotency-Key claim held by this request, if any;
	// executed says whether the request reached execution (a contract
	// was minted or an upstream call started). The answer is stored for
	// replay only then; otherwise the claim is abandoned.
	claim    store.Claim
	renewer  *leaseRenewer // renews claim's lease while the request runs
	executed bool
	// claimSettled: writeRaw handed the claim to its store or release
	// (releaseUnrun leaves it alone after).
	claimSettled bool
	// idemAgent and idemKey are the agent and Idempotency-Key the claim
	// is held under (awaitSettling sets them before any claim).
	idemAgent, idemKey string
	// credentials is the kind of upstream credential each step of the
	// run used (resolveCredentials), for the Attribution-Record; nil
	// when nothing ran.
	credentials []stepCredential
	// planDeadline is the composition deadline of the plan this request
	// runs, set when resolving its upstream credentials took a call (a
	// token exchange: resolveCredentials) and counted against it; zero
	// otherwise (execute then gives the plan composition_timeout).
	planDeadline time.Time
	// preclaimed is the claim a combined store call already made for
	// this request (store.Presenter: with the contract lookup), which
	// claim takes instead of claiming again; nil when none was made.
	preclaimed *store.Claimed
	// prepaid is the gate budget's decision the pair's store call
	// already took (store.PairResolution.Spent), used by spend once.
	prepaid *ratelimit.Decision
	// keptAttempt is the gate refusal's attempt record the pair's store
	// call already kept (store.PairResolution.AttemptKept), used by
	// refuse once.
	keptAttempt *store.Attempt
	// premint is the gate synthesis's MintForPair the pair's store call
	// already did (store.PairResolution.Minted) for premintC, used by
	// gateContract once.
	premint  *store.MintResult
	premintC *recipes.Contract
	// storeFailed: a store call of this request failed as unavailable
	// (it was answered 503 store-unavailable); its record is not
	// retained.
	// retryAfter is the Retry-After, in seconds, of a 503
	// store-unavailable whose store error knew how long it lasts
	// (store.RetryAfterError); 0: storeRetryAfter.
	retryAfter  int64
	storeFailed bool
	written     bool
	// bodyRead: the request's declared body was read to its end (Serve,
	// §10 step 1). An answer without it closes the connection (writeRaw).
	bodyRead bool
	// rawBody is the request body as received, once read to its end:
	// with the method and target it makes the record's request_hash.
	rawBody []byte
	// stateChanging: what executed (a Tier B endpoint or a contract) has
	// a semantic.impact above informational; an executed answer then
	// carries an action_id (RCNS §16.2).
	stateChanging bool
	replayed      bool
	// keyRefused: the request's Idempotency-Key refused it (another
	// request holds the key in flight, or used it for something else)
	// before anything was evaluated (claim): no gate record is written,
	// as on the contract path a later racer takes.
	keyRefused bool
	// minted is the contract this request synthesized, if any; joined
	// the active contract of the pair a concurrent gate request of the
	// same agent minted, which this one runs under instead
	// (joinContract).
	minted *recipes.Contract
	joined *recipes.Contract
	// contract names the contract this answer is produced by running:
	// set just before the contract runs (runContract, an optimistic
	// synthesis) or taken from a replayed record; never on a refusal,
	// which ran nothing. It puts Contract-Synthesized and the
	// Attribution-Record's RCNS fields on the answer (spec §16.1).
	// Zero: none.
	contract idempotency.ContractRef
	// beforeWrite runs once just before the answer is written (durable
	// negotiation records are written before the response).
	beforeWrite func(status int)
	status      int    // status written
	reason      string // reason token of a refusal written
	// kind is what answered the request (the stage that answered sets
	// it, dispatch): the kind label of the request duration histogram.
	kind requestKind
	// operator is the operator the operator page admitted, for its
	// revoke (OperatorRevoke); nil for every AGTP request.
	operator *Operator
	// tr is the request's tracing state (tracing.go), nil when nothing
	// records: the untraced exchange grows by one pointer.
	tr *exchangeTrace
	// lg is the request's logger (log), built on first use.
	lg *zap.Logger
}

// log is the engine's logger with this request's request_id: the
// Request-ID the agent sent, or the one the gateway minted for it
// (the Attribution-Record's request_id). The doors' access log lines
// carry the same value (agtp.Response.RequestID), so every engine line
// about a request joins its access line on it. Built on first use, in
// the request's goroutine: a request that logs nothing pays nothing.
func (x *exchange) log() *zap.Logger {
	if x.lg == nil {
		x.lg = x.h.logger.With(zap.String("request_id", x.requestID))
	}
	return x.lg
}

func (x *exchange) fail(e *agtp.Error) {
	body := map[string]any{
		"status":      e.Status,
		"reason":      e.Reason,
		"explanation": textcut.Truncate(e.Explanation, agtp.MaxExplanationBytes),
		"retryable":   e.Retryable,
	}
	x.reason = e.Reason
	if x.taskID != "" {
		body["task_id"] = x.taskID
	}
	if x.method != "" {
		body["method"] = x.method
	} else if x.in.Method != "" { // "" for a request the door could not read
		body["method"] = x.in.Method
	}
	if x.path != "" {
		body["path"] = x.path
	} else if x.in.URL != nil {
		body["path"] = x.in.URL.Path
	}
	for k, v := range x.failFields {
		body[k] = v
	}
	for k, v := range e.Fields {
		body[k] = v
	}
	hdr := map[string]string{}
	for k, v := range x.failHeaders {
		hdr[k] = v
	}
	if e.AttemptID != "" {
		hdr["RCNS-Attempt-Id"] = e.AttemptID
	}
	if c := x.h.BearerChallenge(e); c != "" {
		hdr["WWW-Authenticate"] = c
	}
	if e.Reason == agtp.IssuerUnavailable.Token {
		hdr["Retry-After"] = strconv.Itoa(issuerRetryAfter)
	}
	if e.Reason == agtp.StoreUnavailable.Token {
		x.storeFailed = true
		after := int64(storeRetryAfter)
		if x.retryAfter > 0 {
			after = x.retryAfter
		}
		hdr["Retry-After"] = strconv.FormatInt(after, 10)
	}
	x.write(e.Status, agtp.MediaAGTP, body, hdr)
}

// failWith is fail with extra headers on the answer, added to the
// exchange's failHeaders (a later one wins).
func (x *exchange) failWith(e *agtp.Error, extra map[string]string) {
	if len(extra) > 0 {
		merged := make(map[string]string, len(x.failHeaders)+len(extra))
		maps.Copy(merged, x.failHeaders)
		maps.Copy(merged, extra)
		x.failHeaders = merged
	}
	x.fail(e)
}

// write makes the AGTP answer: the AGTP response headers (spec §4), an
// explicit Content-Length and the Attribution-Record.
func (x *exchange) write(status int, contentType string, body any, extra map[string]string) {
	var raw []byte
	if body != nil {
		var err error
		switch b := body.(type) {
		case agtp.Envelope:
			raw, err = b.Encode()
		case *agtp.ContractAnswer:
			raw, err = b.Encode()
		default:
			raw, err = json.Marshal(body)
		}
		if err != nil {
			status = http.StatusInternalServerError
			raw = []byte(`{"status":500,"reason":"internal-error","explanation":"response encoding failed","retryable":true}`)
			contentType = agtp.MediaAGTP
		}
	}
	x.writeRaw(status, contentType, raw, extra)
}

// writeRaw is write with an encoded body; the first call wins. It
// settles the request's
// Idempotency-Key claim: the answer is stored when the request reached
// execution, else the claim is released.
func (x *exchange) writeRaw(status int, contentType string, raw []byte, extra map[string]string) {
	if x.written {
		return
	}
	x.written = true
	x.status = status
	if x.beforeWrite != nil {
		x.beforeWrite(status)
	}
	if x.preclaimed != nil && x.preclaimed.Claim != nil {
		// Claimed with the contract lookup, refused before claim took
		// it over: released below.
		x.claim, x.preclaimed = x.preclaimed.Claim, nil
	}
	if x.claim != nil {
		x.renewer.stop()
		x.claimSettled = true
		if x.executed {
			h := map[string]string{}
			if len(raw) > 0 {
				h["Content-Type"] = contentType
			}
			for _, k := range []string{"Negotiation-ID", "Location"} {
				if v := extra[k]; v != "" {
					h[k] = v
				}
			}
			resp := idempotency.Response{Status: status, Header: h, Body: raw, Contract: x.contract}
			if status == policy.StatusContractAvailable && x.minted != nil {
				resp.Previewed = x.minted.SynthesisID // its confirmation may take the key over (claim)
			}
			// The answer goes out whatever the store says: it already
			// ran. With a shared store the answer is stored beside the
			// answer (SettleLater), not before it; a repeat on this
			// node waits for it (awaitSettling), one on another node
			// gets 409 in flight until it lands.
			// A 461 preview is stored before it goes out: its
			// confirmation, the expected next call, may come at once to
			// any node.
			// Beside the answer the store may gather the call with
			// others into one round trip (store.OffAnswerPath).
			ctx, log := context.WithoutCancel(x.ctx()), x.log().With(zap.String("agent_id", x.agentID))
			if p := x.h.shared; p == nil || x.idemKey == "" || resp.Previewed != "" ||
				!p.SettleLater(x.idemAgent, x.idemKey, len(raw), completer(x.h, x.claim, resp, store.OffAnswerPath(ctx), log)) {
				completer(x.h, x.claim, resp, ctx, log)()
			}
		} else {
			ctx, log := context.WithoutCancel(x.ctx()), x.log().With(zap.String("agent_id", x.agentID))
			if p := x.h.shared; p == nil || x.idemKey == "" || !p.SettleLater(x.idemAgent, x.idemKey, 0, releaser(x.h, x.claim, store.OffAnswerPath(ctx), log)) {
				releaser(x.h, x.claim, ctx, log)()
			}
		}
	}
	responseID := newUUID()
	hdr := make([]agtp.Field, 0, 20+len(x.rateHeaders)+len(extra))
	set := func(k, v string) { hdr = append(hdr, agtp.Field{Name: k, Value: v}) }
	set("Server-ID", x.h.ServerID)
	set("Response-ID", responseID)
	set("AGTP-API-Version", x.h.APIVersion())
	if x.agentIDValid { // echoed verbatim; a malformed one is not echoed
		set("Agent-ID", x.agentID)
	}
	if x.identified {
		// Who the gateway took the caller to be, once §10 step 6
		// accepted it (spec §4; cases/02): never on an answer given
		// before identity, nor an anonymous one.
		if x.ownerID != "" {
			set("Owner-ID", x.ownerID)
		}
		set("Trust-Tier", strconv.Itoa(x.trustTier))
		set("Verification-Path", x.verificationPath())
	}
	if x.taskID != "" {
		set("Task-ID", x.taskID)
	}
	if x.requestIDEcho {
		set("Request-ID", x.requestID)
	}
	if x.catalogWrn != "" {
		set("AGTP-Catalog-Warning", x.catalogWrn)
	}
	if x.contract.SynthesisID != "" {
		set("Contract-Synthesized", x.contract.SynthesisID)
	}
	for k, v := range x.rateHeaders {
		set(k, v)
	}
	for k, v := range extra {
		set(k, v)
	}
	sp := x.startSpan(SpanRecordSign)
	record, auditID := x.attribution(status, responseID)
	sp.end()
	set("Attribution-Record", record)
	set("Audit-ID", auditID)
	set("Cache-Control", "no-store")
	if len(raw) > 0 {
		set("Content-Type", contentType)
	}
	set("Content-Length", strconv.Itoa(len(raw)))
	// A refusal before the declared body (Content-Length or chunked)
	// was read leaves the connection unable to carry another request:
	// the door closes it (the HTTP door with Connection: close).
	x.resp = &agtp.Response{Status: status, Header: hdr, Body: raw, Close: x.in.ContentLength != 0 && !x.bodyRead}
}

// replay answers with a stored idempotent response: the stored status,
// headers and body byte for byte, with a fresh Response-ID and
// Attribution-Record and Idempotent-Replayed: true (spec §12.2, OP-15).
// It names the contract the first answer ran, if any, whatever route
// the repeat took: never the one this request would have run.
func (x *exchange) replay(resp *idempotency.Response) {
	x.replayed = true
	x.contract = resp.Contract
	extra := map[string]string{"Idempotent-Replayed": "true"}
	ct := resp.Header["Content-Type"]
	if loc := resp.Header["Location"]; loc != "" {
		extra["Location"] = loc
	}
	if neg := resp.Header["Negotiation-Id"]; neg != "" {
		extra["Negotiation-ID"] = neg // AGTP spelling (OP-35)
	}
	x.writeRaw(resp.Status, ct, resp.Body, extra)
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
		if l := x.agentLog("session-id-disagree"); l != nil {
			l.Info("session ids disagree; the "+x.sessionFrom+" wins (OP-37)", zap.String("agent_id", x.agentID),
				zap.String("session_id", x.sessionID), zap.String("from", x.sessionFrom),
				zap.String("ignored_session_id", s), zap.String("ignored_from", from))
		}
	}
}

// identifiers records, for one request, which of Request-ID and
// Owner-ID it sent and which of those, Session-ID and Task-ID are
// malformed (checked once, in engine.newExchange; present means
// checked, so an empty one is malformed).
type identifiers struct {
	requestIDSent, ownerIDSent                        bool
	badRequestID, badOwnerID, badSessionID, badTaskID bool
}

// completer returns the func that stores resp, the answer of a request
// that ran, under its Idempotency-Key claim cl, and handles a failure:
// a claim that cannot be completed holds its key (repeats get 409
// meanwhile) until the answer is stored by a retry in the background
// (store unavailable) or its hold passes. It captures what it needs, so
// it may run after the exchange is reused (SharedStore.SettleLater).
func completer(h *Engine, cl store.Claim, resp idempotency.Response, ctx context.Context, log *zap.Logger) func() {
	return func() {
		if err := cl.Complete(ctx, resp); err != nil {
			if errors.Is(err, store.ErrClaimLost) {
				log.Warn("the answer of an Idempotency-Key was not stored: an operator released or resolved the key, or the store lost the claim; a repeat of the key is not replayed this answer",
					zap.Int("status", resp.Status))
			} else if p := h.shared; p != nil && errors.Is(err, store.ErrUnavailable) && p.RetryComplete(cl, resp, log) {
				log.Warn("the store did not confirm storing the answer of an Idempotency-Key (it may have, its reply lost); retrying in the background (until it is stored, repeats of the key may get 409, outcome-unknown once its lease ended)", zap.Error(err))
			} else {
				log.Error("storing the answer of an Idempotency-Key failed; repeats of the key get outcome-unknown once its lease ends", zap.Error(err))
			}
		}
		h.idempotencyChanged(ctx)
	}
}

// releaser returns the func that releases the Idempotency-Key claim cl
// of a request that did not reach execution (a repeat may run it), as
// completer does for an answer.
func releaser(h *Engine, cl store.Claim, ctx context.Context, log *zap.Logger) func() {
	return func() {
		h.release(ctx, cl, log)
		h.idempotencyChanged(ctx)
	}
}

// release releases the Idempotency-Key claim cl of a request that did
// not reach execution. When the store does not answer, the release is
// retried in the background (SharedStore.RetryAbandon): the request was
// answered "nothing was executed", so its key must come free for the
// retry, not end outcome-unknown once its lease passes.
func (h *Engine) release(ctx context.Context, cl store.Claim, log *zap.Logger) {
	err := cl.Abandon(ctx)
	switch {
	case err == nil:
	case h.shared != nil && errors.Is(err, store.ErrUnavailable) && h.shared.RetryAbandon(cl, log):
		log.Warn("the store did not confirm releasing an Idempotency-Key claim (it may have, its reply lost); retrying in the background (until it is released, repeats of the key may get 409)", zap.Error(err))
	default:
		log.Error("releasing an Idempotency-Key claim failed; repeats of the key get 409 until its lease ends, outcome-unknown after", zap.Error(err))
	}
}
