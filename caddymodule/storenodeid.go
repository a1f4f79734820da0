package caddymodule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"

	"go.uber.org/zap"
)

// processInstance names this Caddy process in node id holds
// (redisstore.Client.HoldNodeID): 128 random bits, drawn once, so every
// configuration and client of one process is one holder.
var processInstance = func() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// nodeHoldTTL is how long a node id hold lasts without a refresh: three
// health checks, so a process that died frees its id within 15 s.
const nodeHoldTTL = 3 * storeHealthUp

// nodeHold is what the health check knows of one node id: the other
// holder's value it last saw, whether that holder is alive (seen
// refreshing), and whether the clash was logged.
type nodeHold struct {
	last   string
	alive  bool
	warned bool
}

// checkNodeIDs holds, for this process, the node_id of every
// configuration using the client, and tells the SRE when another live
// process uses the same node_id on the same Redis and key prefix: the
// two then interleave the record chains and chain heads kept per node
// (docs/cluster.md). The process that finds the id held watches the
// holder's refresh time; once it changes the holder is alive, and this
// one logs a WARN, sets caddy_rcns_store_node_id_conflict and leaves a
// marker that makes the holder do the same at its next check. A
// process that restarts within nodeHoldTTL sees its predecessor's
// stale hold, which never refreshes: no warning. Called by the health
// check only, after a PING that succeeded.
func (p *pooledRedis) checkNodeIDs(ctx context.Context) {
	users := p.users.Load()
	if users == nil {
		return
	}
	p.nodeMu.Lock()
	defer p.nodeMu.Unlock()
	if p.nodes == nil {
		p.nodes = map[string]*nodeHold{}
	}
	seen := map[string]bool{}
	for _, u := range *users {
		id := u.NodeID()
		if seen[id] {
			continue
		}
		seen[id] = true
		st := p.nodes[id]
		if st == nil {
			st = &nodeHold{}
			p.nodes[id] = st
		}
		other, conflict, err := p.client.HoldNodeID(ctx, id, p.instance, nodeHoldTTL, st.alive)
		if err != nil {
			return // the next check tries again; the error is in the store metrics
		}
		if other == "" {
			st.last, st.alive = "", false
		} else {
			if st.last != "" && other != st.last && holderInstance(other) == holderInstance(st.last) {
				st.alive = true
			}
			st.last = other
		}
		clash := st.alive || conflict != ""
		switch {
		case clash && !st.warned:
			who := conflict
			if st.alive {
				who = holderInstance(other)
			}
			p.logger.Warn("another live gateway process uses this node_id on the same Redis and key_prefix: the two interleave the record chains kept per node; give every node its own node_id (docs/cluster.md)",
				zap.String("node_id", id), zap.String("other_instance", who), zap.String("instance", p.instance))
		case !clash && st.warned:
			p.logger.Info("node_id is no longer used by another process", zap.String("node_id", id))
		}
		st.warned = clash
		for _, u := range *users {
			if u.NodeID() == id {
				u.StoreMetrics().SetNodeIDConflict(clash)
			}
		}
	}
}

// holderInstance is the instance part of a holder value
// "<instance>:<Unix ms>".
func holderInstance(v string) string {
	inst, _, _ := strings.Cut(v, ":")
	return inst
}
