package engine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/hexid"
)

// Read ACL modes of INSPECT target=audit and target=chain_head (spec
// §17.3; RecordsConfig.AuditReadACL).
const (
	// ACLAgentOnly lets an agent read its own records and chain heads,
	// and a caller carrying inspect:all read any (as INSPECT
	// target=contract does).
	ACLAgentOnly = "agent_only"
	// ACLOperatorOnly lets only a caller carrying inspect:all read them.
	ACLOperatorOnly = "operator_only"
	// ACLPublic lets every identified agent read every record.
	ACLPublic = "public"
)

// mayRead reports whether the caller may read a record or chain of
// owner ("" for an anonymous request's) under the configured read ACL.
func (h *Engine) mayRead(req *request, owner string) bool {
	switch h.AuditReadACL {
	case ACLPublic:
		return true
	case ACLOperatorOnly:
		return h.inspectAll(req)
	}
	return owner != "" && owner == req.caller.Agent.ID || h.inspectAll(req)
}

// aclRefusal is the 403 of a read the ACL refuses: it names the mode,
// never whose record it is (spec §17.3).
func (h *Engine) aclRefusal(what string) *agtp.Error {
	who := "the agent it belongs to or a caller carrying inspect:all"
	if h.AuditReadACL == ACLOperatorOnly {
		who = "a caller carrying inspect:all"
	}
	return agtp.Forbidden.WithFields(fmt.Sprintf("the read ACL of %s is %s: only %s may read it", what, h.AuditReadACL, who),
		map[string]any{"acl": h.AuditReadACL})
}

// inspectAudit serves INSPECT target=audit: the retained
// Attribution-Record with the Audit-ID audit_id, as it was sent, with
// the agent and node whose chain it is on (spec §17.3; docs/cluster.md
// "Retention bounds"). A record past its retention, or never retained
// (answered while the store was down), is 404 record-not-found.
func (h *Engine) inspectAudit(x *exchange, req *request, p map[string]any) {
	id, e := strParam(p, "INSPECT target=audit", "audit_id")
	if e != nil {
		x.fail(e)
		return
	}
	if id == "" {
		x.fail(agtp.ParameterRequired.New("INSPECT target=audit needs audit_id"))
		return
	}
	if !hexid.Valid(id) {
		x.fail(agtp.InvalidParameter.New("INSPECT target=audit: parameter audit_id must be an Audit-ID (64 lowercase hexadecimal characters)"))
		return
	}
	rec, found, err := h.sto.Records.Get(x.ctx(), id)
	if err != nil {
		h.storeFailed(x, err)
		return
	}
	if !found {
		x.fail(agtp.RecordNotFound.New("no retained Attribution-Record has this Audit-ID (" + h.retentionText() + ")"))
		return
	}
	// Under agent_only a person behind an agent (identity oauth) reads
	// that person's records only, not the agent's other people's.
	if !h.mayRead(req, rec.AgentID) || (h.AuditReadACL != ACLPublic && !h.inspectAll(req) && x.person() != "" && rec.Person != x.person()) {
		x.fail(h.aclRefusal("Attribution-Records"))
		return
	}
	var agent any
	if rec.AgentID != "" {
		agent = rec.AgentID
	}
	x.write(200, agtp.MediaAGTP, map[string]any{"target": "audit", "audit_id": rec.AuditID, "agent_id": agent,
		"node_id": rec.NodeID, "issued_at": rec.IssuedAt.UTC().Format(time.RFC3339Nano), "format": "jws", "record": rec.Compact}, nil)
}

// inspectChainHead serves INSPECT target=chain_head: the heads of the
// agent's Attribution-Record chains, one per node that recorded for it
// within the retention (docs/cluster.md "one chain per (agent, node)"),
// agent_id defaulting to the caller. audit_id is also given when there
// is exactly one (one node). No head is 404 record-not-found.
func (h *Engine) inspectChainHead(x *exchange, req *request, p map[string]any) {
	agent, e := agentParam(p, "INSPECT target=chain_head")
	if e != nil {
		x.fail(e)
		return
	}
	if agent == "" {
		agent = req.caller.Agent.ID
	}
	if !h.mayRead(req, agent) {
		x.fail(h.aclRefusal("record chains"))
		return
	}
	heads, err := h.sto.Records.Heads(x.ctx(), agent)
	if err != nil {
		h.storeFailed(x, err)
		return
	}
	if len(heads) == 0 {
		x.fail(agtp.RecordNotFound.New("no Attribution-Record of this agent is retained (" + h.retentionText() + ")"))
		return
	}
	list := make([]map[string]any, len(heads))
	for i, hd := range heads {
		list[i] = map[string]any{"node_id": hd.NodeID, "audit_id": hd.AuditID}
	}
	body := map[string]any{"target": "chain_head", "agent_id": agent, "heads": list}
	if len(heads) == 1 {
		body["audit_id"], body["node_id"] = heads[0].AuditID, heads[0].NodeID
	}
	x.write(200, agtp.MediaAGTP, body, nil)
}

// retentionText says, for a record-not-found explanation, what bounds
// the retained Attribution-Records: RecordRetention on every store, and
// on the memory store MaxRetainedRecords too (the oldest dropped past
// it), e.g. "records are kept 24h, at most the newest 100000".
func (h *Engine) retentionText() string {
	s := "records are kept " + agtp.FormatDuration(h.recordRetention())
	if h.shared == nil {
		n := h.MaxRetainedRecords
		if n == 0 {
			n = store.DefaultMaxRecords
		}
		s += ", at most the newest " + strconv.Itoa(n)
	}
	return s
}
