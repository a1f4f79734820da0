package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/policy/idempotency"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// attribution builds the Attribution-Record (spec §16; unsigned JWS
// `alg: none` form, built by hand) and its Audit-ID, chained per
// requesting Agent-ID (OP-22) on this node: node_id names the node, so
// each agent's records form one chain per (agent, node)
// (docs/cluster.md). The payload JSON is appended by hand in
// encoding/json's sorted-key order (byte-identical output). The record
// is retained in the store for INSPECT target=audit and chain_head
// (retain).
func (x *exchange) attribution(status int, responseID string) (string, string) {
	chainKey := x.recordAgent
	issued := x.h.now().UTC()
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
		if id := x.ident; id != nil && id.Issuer != "" {
			// Identity oauth: who vouched for the caller (the other
			// modes' records are unchanged).
			field("identity_assurance", id.VerificationPath)
			field("identity_issuer", id.Issuer)
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
		field("node_id", x.h.nodeID)
		if id := x.ident; id != nil && id.ClientID != "" {
			field("oauth_client_id", id.ClientID)
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
		if x.executed && len(x.credentials) > 0 {
			// Which kind of credential each step's upstream request
			// carried, never its value (resolved credentials of a run
			// that was then refused are not named).
			b = append(b, `,"upstream_credentials":[`...)
			for i, c := range x.credentials {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"kind":`...)
				b = str(b, c.Kind)
				b = append(b, `,"step":`...)
				b = str(b, c.Step)
				b = append(b, `,"upstream":`...)
				b = str(b, c.Upstream)
				b = append(b, '}')
			}
			b = append(b, ']')
		}
		b = append(b, '}')
		c, a := x.h.signer.SignJSON(b)
		if x.h.mem != nil {
			// In memory the head is retained under the chain's lock,
			// so it is always the chain's newest record.
			x.retain(a, c, issued)
		}
		return c, a, nil
	})
	if err != nil {
		x.log().Error("signing Attribution-Record", zap.Error(err))
	} else if x.h.mem == nil {
		// A shared store's round trip is not made under the chain's
		// lock: concurrent answers of one agent on one node may retain
		// their heads out of order (the newer record names the older
		// one as previous_audit_id all the same).
		x.retain(auditID, compact, issued)
	}
	return compact, auditID
}

// retain keeps the record in the store (store.Records) for INSPECT
// target=audit and chain_head. The Redis store queues it and writes it
// off the answer path, many records to a round trip. A request that met
// the store down, or a store known to be down, retains nothing. Failures
// are logged (a failed batch is counted under op record); the answer
// goes out.
func (x *exchange) retain(auditID, compact string, issued time.Time) {
	h := x.h
	if x.storeFailed || h.storeDown() {
		return
	}
	err := h.sto.Records.Retain(context.WithoutCancel(x.ctx()), store.Record{AuditID: auditID, AgentID: x.recordAgent, Person: x.person(),
		NodeID: h.nodeID, Compact: compact, IssuedAt: issued})
	switch {
	case errors.Is(err, store.ErrUnavailable):
		// DEBUG: the outage is logged once each way by the health check
		// (logOutage); each failed round trip is counted by op.
		x.log().Debug("retaining an Attribution-Record failed: INSPECT target=audit will not find it", zap.String("audit_id", auditID), zap.Error(err))
	case err != nil:
		x.log().Warn("retaining an Attribution-Record failed: INSPECT target=audit will not find it", zap.String("audit_id", auditID), zap.Error(err))
	}
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
