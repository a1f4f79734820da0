package caddymodule

import (
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

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
	// Not for an answer given before the body was read, nor for a
	// request the door could not read (no method, no target).
	if x.in.Target != "" && (x.in.ContentLength == 0 || x.bodyRead) {
		reqHash = requestHash(x.in.Method, x.in.Target, x.rawBody)
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
