package caddymodule

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// Media types (spec §2.1, api-01 §17).
const (
	mediaAGTP     = "application/vnd.agtp+json"
	mediaManifest = "application/vnd.agtp.manifest+json"
	mediaEndpoint = "application/vnd.agtp.endpoint+json"
)

// wireError is the one way a refusal or error reaches the wire: the
// uniform body of spec §19 (OP-28) plus retryable.
type wireError struct {
	Status      int
	Reason      string
	Explanation string
	Retryable   bool
	Fields      map[string]any
	AttemptID   string // RCNS-Attempt-Id (every 464)
}

func fromRefusal(r *policy.Refusal) *wireError {
	return &wireError{Status: r.Status, Reason: r.Reason, Explanation: r.Explanation, Retryable: r.Retryable, Fields: r.Fields}
}

func errorf(status int, reason, explanation string) *wireError {
	return &wireError{Status: status, Reason: reason, Explanation: explanation}
}

// exchange is one AGTP request in flight: what the response headers and
// the Attribution-Record need.
type exchange struct {
	h     *Handler
	w     http.ResponseWriter
	r     *http.Request
	query url.Values // the request query, parsed and checked once (parseQuery)
	// presentedID is the synthesis id of the contract a keyed request
	// presents (Contract-Synthesized, §10 step 7), "" otherwise; and
	// presentedPending whether that contract was still pending (a 461
	// not yet accepted) when presented. claim checks the key's stored
	// answer against them (ClaimConfirming).
	presentedID      string
	presentedPending bool
	taskID           string
	requestID        string
	// requestIDEcho: requestID is the request's own well-formed
	// Request-ID, echoed on the answer (not one the gateway minted).
	requestIDEcho bool
	agentID       string // verbatim header value
	agentIDValid  bool   // agentID is 64 lowercase hex (echoed only then)
	// recordAgent is agentID once the identity mode accepted it (at
	// once under identity header on loopback, else once verified) and
	// the registry knows it: the Attribution-Record's agent_id and chain
	// key ("" until then, as for an anonymous request).
	recordAgent string
	// loopback: under identity header, the request arrived on a
	// loopback listener (localIsLoopback, read once in ServeHTTP).
	loopback bool
	ids      identifiers // which identifier headers came, and which are malformed
	// ownerClaim is a well-formed Owner-ID header value, checked against
	// the registry at §10 step 6. ownerID is the owner the
	// Attribution-Record states: the registry owner of recordAgent (set
	// with it), or, on an anonymous request (no Agent-ID), the claim
	// itself. A request naming an Agent-ID the gateway does not record
	// (unknown, malformed, unverified) never gets a record stating the
	// owner it claimed, nor does an owner-mismatch refusal.
	ownerClaim string
	ownerID    string
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
	claim    *idempotency.Claim
	executed bool
	written  bool
	// bodyRead: the request's declared body was read to its end (serve,
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
	// minted is the contract this request synthesized, if any.
	minted *recipes.Contract
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
}

// maxExplanationBytes bounds an error answer's explanation (bytes): the
// net under every refusal that quotes what the caller sent (each quote
// is also cut on its own, see clip), so no answer echoes a body back.
const maxExplanationBytes = 2048

func (x *exchange) fail(e *wireError) {
	body := map[string]any{
		"status":      e.Status,
		"reason":      e.Reason,
		"explanation": recipes.Truncate(e.Explanation, maxExplanationBytes),
		"retryable":   e.Retryable,
	}
	x.reason = e.Reason
	if x.taskID != "" {
		body["task_id"] = x.taskID
	}
	if x.method != "" {
		body["method"] = x.method
	} else if x.r != nil {
		body["method"] = x.r.Method
	}
	if x.path != "" {
		body["path"] = x.path
	} else if x.r != nil {
		body["path"] = x.r.URL.Path
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
	x.write(e.Status, mediaAGTP, body, hdr)
}

// responseJSON makes encoding/json/v2 write values as encoding/json.Marshal
// does (keys sorted, <>& and U+2028/2029 escaped, nil slices and maps as
// null; invalid UTF-8 becomes U+FFFD, written as the character where
// encoding/json writes \ufffd): the fallback for result values that
// jsonenc.AppendValue does not model (TestEnvelopeEncodingMatchesEncodingJSON).
var responseJSON = jsonv2.JoinOptions(jsonv2.Deterministic(true), jsontext.EscapeForHTML(true), jsontext.EscapeForJS(true),
	jsontext.AllowInvalidUTF8(true), jsonv2.FormatNilSliceAsNull(true), jsonv2.FormatNilMapAsNull(true))

// encodeEnvelope writes a success envelope as encoding/json.Marshal
// does (fields in declaration order: result, status, task_id): by hand
// for plain decoded-JSON results (jsonenc.AppendValue), through
// json/v2 with responseJSON for anything else.
func encodeEnvelope(e envelopeBody) ([]byte, error) {
	b := make([]byte, 0, 256)
	b = append(b, `{"result":`...)
	b, ok := jsonenc.AppendValue(b, e.Result, true)
	if !ok {
		return jsonv2.Marshal(e, responseJSON)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	if e.TaskID != "" {
		b = append(b, `,"task_id":`...)
		b = jsonenc.AppendStringHTML(b, e.TaskID)
	}
	return append(b, '}'), nil
}

// write sends one AGTP response: the AGTP response headers (spec §4),
// an explicit Content-Length, never chunked, and the Attribution-Record.
func (x *exchange) write(status int, contentType string, body any, extra map[string]string) {
	var raw []byte
	if body != nil {
		var err error
		switch b := body.(type) {
		case envelopeBody:
			raw, err = encodeEnvelope(b)
		case *contractAnswer:
			raw, err = b.encode()
		default:
			raw, err = json.Marshal(body)
		}
		if err != nil {
			status = http.StatusInternalServerError
			raw = []byte(`{"status":500,"reason":"internal-error","explanation":"response encoding failed","retryable":true}`)
			contentType = mediaAGTP
		}
	}
	x.writeRaw(status, contentType, raw, extra)
}

// writeRaw is write with an encoded body. It settles the request's
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
	if x.claim != nil {
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
			x.claim.Complete(resp)
		} else {
			x.claim.Abandon()
		}
	}
	hd := x.w.Header()
	responseID := newUUID()
	// One backing array for the header values instead of a slice per
	// field; each field gets a one-element, capacity-capped window.
	vals := make([]string, 0, 16+len(x.rateHeaders)+len(extra))
	set := func(k, v string) {
		vals = append(vals, v)
		hd[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set("Server-ID", x.h.ServerID)
	set("Response-ID", responseID)
	set("AGTP-API-Version", x.h.apiVersion())
	if x.agentIDValid { // echoed verbatim; a malformed one is not echoed
		set("Agent-ID", x.agentID)
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
	record, auditID := x.attribution(status, responseID)
	set("Attribution-Record", record)
	set("Audit-ID", auditID)
	set("Cache-Control", "no-store")
	if len(raw) > 0 {
		set("Content-Type", contentType)
	} else {
		delete(hd, "Content-Type")
	}
	set("Content-Length", strconv.Itoa(len(raw)))
	if x.r.ContentLength != 0 && !x.bodyRead && x.r.ProtoMajor == 1 {
		// A refusal before the declared body (Content-Length or chunked)
		// was read: net/http would otherwise try to discard the unread
		// body before finishing the answer, which for a body that never
		// comes waits out the server's read timeout. With Connection:
		// close it skips the discard and the answer leaves at once.
		// HTTP/1 only: on HTTP/2 the header would shut the whole
		// connection down, and a stream's unread body is reset instead.
		set("Connection", "close")
	}
	x.w.WriteHeader(status)
	if len(raw) > 0 && x.r.Method != http.MethodHead {
		_, _ = x.w.Write(raw)
	}
}

// attribution builds the Attribution-Record (spec §16; unsigned JWS
// `alg: none` form, built by hand) and its Audit-ID, chained per
// requesting Agent-ID (OP-22). The payload JSON is appended by
// hand in encoding/json's sorted-key order (byte-identical output).
func (x *exchange) attribution(status int, responseID string) (string, string) {
	chainKey := x.recordAgent
	issued := time.Now().UTC()
	str := jsonenc.AppendString
	// Computed before the chain lock: only what depends on the chain's
	// head is built under it.
	var reqHash, actionID string
	if x.r.ContentLength == 0 || x.bodyRead { // not for an answer given before the body was read
		reqHash = requestHash(x.r.Method, x.r.RequestURI, x.rawBody)
	}
	if x.executed && x.stateChanging {
		actionID = newUUID()
	}
	compact, auditID, err := x.h.st.records.chains.Append(chainKey, func(prev string) (string, string, error) {
		b := make([]byte, 0, 768)
		b = append(b, '{')
		field := func(k, v string) {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, k...)
			b = append(b, '"', ':')
			b = str(b, v)
		}
		if actionID != "" {
			field("action_id", actionID)
		}
		if x.recordAgent != "" {
			field("agent_id", x.recordAgent)
		}
		field("audit_record_version", "1")
		if x.contract.ContractHash != "" {
			field("contract_hash", x.contract.ContractHash)
		}
		// RFC 3339 text needs no JSON escaping: appended in place.
		b = append(b, `,"issued_at":"`...)
		b = issued.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
		if x.method != "" {
			field("method", x.method)
		}
		if x.contract.NegotiationOrigin != "" {
			field("negotiation_origin", x.contract.NegotiationOrigin)
		}
		if x.ownerID != "" {
			field("owner_id", x.ownerID)
		}
		field("previous_audit_id", prev)
		if reqHash != "" { // 64 hex: no escaping
			b = append(b, `,"request_hash":"`...)
			b = append(b, reqHash...)
			b = append(b, '"')
		}
		field("request_id", x.requestID)
		if x.requested != "" {
			field("requested_method", x.requested)
		}
		field("response_id", responseID)
		field("server_id", x.h.ServerID)
		if x.sessionID != "" {
			field("session_id", x.sessionID)
		}
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(status), 10)
		if x.contract.SynthesisID != "" {
			field("synthesis_id", x.contract.SynthesisID)
		}
		if x.taskID != "" {
			field("task_id", x.taskID)
		}
		b = append(b, '}')
		c, a := x.h.signer.SignJSON(b)
		return c, a, nil
	})
	if err != nil {
		x.h.logger.Error("signing Attribution-Record", zap.Error(err))
	}
	return compact, auditID
}

// requestHash is an Attribution-Record's request_hash (RCNS §16.2): 64
// lowercase hex, idempotency.Fingerprint (SHA-256 over the method, the
// target and the SHA-256 of the body, each length-prefixed with 8 bytes
// big-endian) over the request as it came, not in its canonical form, so
// an auditor holding the request recomputes it from the bytes alone.
func requestHash(method, target string, body []byte) string {
	return idempotency.Fingerprint(method, target, body)
}

func newUUID() string {
	u, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return u.String()
}

// attemptRecord is one RCNS attempt (spec §17.3 target=rcns-attempt).
type attemptRecord struct {
	ID          string            `json:"attempt_id"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	AgentID     string            `json:"agent_id"`
	TrustTier   int               `json:"trust_tier"`
	Locks       map[string]string `json:"locks"`
	Reason      string            `json:"reason"`
	Explanation string            `json:"explanation"`
	At          string            `json:"at"`
}

// attemptRing is a bounded ring of attempt records; the oldest is
// evicted first.
type attemptRing struct {
	mu    sync.Mutex
	size  int
	order []string
	byID  map[string]*attemptRecord
}

func newAttemptRing(n int) *attemptRing {
	return &attemptRing{size: n, byID: map[string]*attemptRecord{}}
}

func (a *attemptRing) resize(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.size = n
	a.trimLocked()
}

func (a *attemptRing) add(rec *attemptRecord) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byID[rec.ID] = rec
	a.order = append(a.order, rec.ID)
	a.trimLocked()
}

func (a *attemptRing) trimLocked() {
	for len(a.order) > a.size {
		delete(a.byID, a.order[0])
		a.order = a.order[1:]
	}
}

func (a *attemptRing) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.order)
}

func (a *attemptRing) get(id string) (*attemptRecord, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.byID[id]
	return r, ok
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
