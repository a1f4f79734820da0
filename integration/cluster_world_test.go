package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp/wire"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store/redistest"
)

// Cluster worlds: two gateways (two `caddy run` processes, nodes A and
// B) on one shared Redis store (docs/cluster.md), with the same agents,
// endpoints and recipes, in front of one json-server behind one counting
// proxy, so every upstream execution of either node is counted in one
// place. The Redis deployment is one of three topologies started by
// caddymodule/store/redistest on loopback ports: a single server, a
// three-master Redis Cluster, or a Sentinel group.

// Bounds of the cluster tests' waits.
const (
	storeRecovery   = 45 * time.Second // Redis back (or failed over) → the gateways serve state again
	clusterSettle   = 30 * time.Second // a restarted Redis Cluster reports cluster_state:ok
	outageLoadLimit = 20 * time.Second // the whole load phase of an outage test
)

// redisTopology is a running Redis deployment and the `store redis`
// block that points a gateway at it.
type redisTopology struct {
	name string
	// lines are the settings inside `store redis { … }` that point at
	// the deployment.
	lines string
	// kill stops every data server (as a crash would); restart starts
	// them again, empty, and waits until they serve.
	kill, restart func(t testing.TB)
	// pause stops every data server (SIGSTOP: a stall, their sockets
	// open and buffering); resume continues them.
	pause, resume func(t testing.TB)
	// servers are the data servers' addresses (for CONFIG, INFO).
	servers []string
}

// startSingleRedis starts one redis-server (noeviction, as docs/cluster.md
// asks) and returns it with its topology.
func startSingleRedis(t testing.TB) (*redistest.Server, *redisTopology) {
	t.Helper()
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	keepPort(srv)
	return srv, &redisTopology{
		name:    "single",
		lines:   "address " + srv.Addr(),
		kill:    func(testing.TB) { srv.Stop() },
		restart: func(testing.TB) { srv.Restart() },
		pause:   func(testing.TB) { srv.Pause() },
		resume:  func(testing.TB) { srv.Resume() },
		servers: []string{srv.Addr()},
	}
}

// startRedisCluster starts a three-master Redis Cluster
// (`redis-server --cluster-enabled yes`, `redis-cli --cluster create`).
// Its restart brings every master back on its port with its
// nodes.conf (the same node ids and slots, no data) and waits until
// each reports cluster_state:ok.
func startRedisCluster(t testing.TB) (*redistest.Cluster, *redisTopology) {
	t.Helper()
	c := redistest.StartCluster(t, 3)
	for _, n := range c.Nodes {
		keepPort(n)
	}
	return c, &redisTopology{
		name:  "cluster",
		lines: "mode cluster\naddress " + strings.Join(c.Addrs(), " "),
		pause: func(testing.TB) {
			for _, n := range c.Nodes {
				n.Pause()
			}
		},
		resume: func(testing.TB) {
			for _, n := range c.Nodes {
				n.Resume()
			}
		},
		servers: c.Addrs(),
		kill: func(testing.TB) {
			for _, n := range c.Nodes {
				n.Stop()
			}
		},
		restart: func(t testing.TB) {
			for _, n := range c.Nodes {
				n.Restart()
			}
			for _, n := range c.Nodes {
				waitFor(t, clusterSettle, 100*time.Millisecond, "cluster node "+n.Addr()+" to report cluster_state:ok", func() bool {
					info, err := redistest.Do(n.Addr(), "CLUSTER", "INFO")
					return err == nil && strings.Contains(info, "cluster_state:ok")
				})
			}
		},
	}
}

// startSentinelRedis starts a Sentinel group (a master, a replica, three
// sentinels) whose sentinels declare the master down only after 60 s
// without answers, so that a loaded machine does not see a failover in
// the middle of a suite. Its topology has no kill, restart, pause or
// resume: a failover is TestClusterSentinelFailover's, so the suites
// that stop or stall every data server do not run on it.
func startSentinelRedis(t testing.TB) (*redistest.Sentinel, *redisTopology) {
	t.Helper()
	g := redistest.StartSentinelDownAfter(t, time.Minute)
	return g, &redisTopology{
		name:    "sentinel",
		lines:   sentinelLines(g),
		servers: []string{g.Master.Addr()},
	}
}

// keepPort keeps freePort from handing out srv's port while srv is
// stopped (an outage), so a gateway started meanwhile cannot take the
// port srv restarts on.
func keepPort(srv *redistest.Server) {
	givenPorts.Lock()
	defer givenPorts.Unlock()
	givenPorts.m[srv.Port] = true
}

// sentinelLines are the store settings of a Sentinel group.
func sentinelLines(g *redistest.Sentinel) string {
	return fmt.Sprintf("mode sentinel\naddress %s\nmaster_name %s", strings.Join(g.SentinelAddrs(), " "), g.MasterName)
}

// storeBlock is the `store redis { … }` block of the rcns block with
// lines (one setting a line) and, when not empty, a key_prefix: worlds
// on one Redis with different prefixes share no state.
func storeBlock(lines, prefix string) string {
	if prefix != "" {
		lines += "\nkey_prefix " + prefix
	}
	var b strings.Builder
	b.WriteString("\t\tstore redis {\n")
	for l := range strings.SplitSeq(lines, "\n") {
		b.WriteString("\t\t\t" + l + "\n")
	}
	b.WriteString("\t\t}\n")
	return b.String()
}

// block is the topology's store block with the default key prefix.
func (r *redisTopology) block() string { return storeBlock(r.lines, "") }

// Cluster agents: the four demo agents (in header identity mode, no
// keys) plus agents of their own for the tests that count one agent's
// budget or need a fresh one.
var (
	agentBudget  = agentID("rcns-it-cluster-budget")  // the 11th gate evaluation
	agentRecover = agentID("rcns-it-cluster-recover") // gate evaluations after an outage
	agentRevoke  = agentID("rcns-it-cluster-revoke")  // REVOKE across nodes
	// agentCoalesce sends concurrent first gate calls; agentKilled the
	// request whose node is killed mid-step (cluster_liveness_test.go).
	agentCoalesce = agentID("rcns-it-cluster-coalesce")
	agentKilled   = agentID("rcns-it-cluster-killed")
	// agentRepeat repeats a key while its request runs
	// (livenessRepeatHere).
	agentRepeat = agentID("rcns-it-cluster-repeat")
	// agentNegotiate's PROPOSE turns go from node to node
	// (clusterNegotiationAcross).
	agentNegotiate = agentID("rcns-it-cluster-negotiate")
)

// clusterAgents writes the cluster tests' agent documents (keys, for
// identity signature, given by name).
func clusterAgents(t testing.TB, keys map[string]*idvKey) string {
	t.Helper()
	docs := []idvAgentDoc{idvDemo("rcns-demo-agent"), idvDemo("rcns-demo-noscope"), idvDemo("rcns-demo-tier3"), idvDemo("rcns-demo-operator")}
	for _, n := range []string{"rcns-it-cluster-budget", "rcns-it-cluster-recover", "rcns-it-cluster-revoke", "rcns-it-cluster-coalesce", "rcns-it-cluster-killed", "rcns-it-cluster-repeat", "rcns-it-cluster-persist", "rcns-it-cluster-negotiate"} {
		docs = append(docs, idvAgentDoc{name: n, tier: 1, scopes: []string{"rcns:negotiate", "hotel:read", "hotel:book"}})
	}
	for i := range docs {
		if k := keys[docs[i].name]; k != nil {
			docs[i].keys = []map[string]any{k.jwk}
		}
	}
	return idvWriteAgents(t, docs...)
}

// clusterOpts configures startClusterWorld.
type clusterOpts struct {
	Identity string // header (default) or signature
	Agents   string // agents directory (default clusterAgents(t, nil))
	Extra    string // more lines in both rcns blocks
	// CatchAll serves every Host (`http://:PORT`), as nodes behind a load
	// balancer that forwards its own name.
	CatchAll bool
	// Required is the store_required line ("" leaves it out: on).
	Required string
	// Nodes is how many gateways (default 2).
	Nodes int
	// NodeID, when set, is the node_id of every node (the
	// misconfiguration TestClusterNodeIDConflict makes); else each has
	// its own (clusterNodeNames).
	NodeID string
	// Mode is the synthesis mode (default optimistic).
	Mode string
	// StoreB, when set, is the store block of the nodes after the first
	// (node A reaching Redis through a fault proxy, node B directly).
	StoreB string
}

// clusterWorld is json-server, the counting proxy in front of it (the
// rcns `hotel` upstream every node calls) and the gateways, node A first.
type clusterWorld struct {
	JS    *JSONServer
	Hotel *Counter
	Nodes []*Gateway
	A, B  *Gateway
}

// clusterNodeNames are the node_id values of the gateways, in order.
var clusterNodeNames = []string{"node-a", "node-b", "node-c"}

// startClusterWorld starts json-server, the counting proxy and the
// nodes, each in optimistic mode with the given store block (written
// verbatim into the rcns block; "" for none), its own node_id and its
// own admin, site (and, over the native door, AGTP) ports.
func startClusterWorld(t testing.TB, store string, o clusterOpts) *clusterWorld {
	t.Helper()
	w := &clusterWorld{JS: startJSONServer(t, hotelDB)}
	w.Hotel = startCountingProxy(t, w.JS.URL)
	if o.Identity == "" {
		o.Identity = "header"
	}
	if o.Agents == "" {
		o.Agents = clusterAgents(t, nil)
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	for i := range o.Nodes {
		st := store
		if i > 0 && o.StoreB != "" {
			st = o.StoreB
		}
		w.Nodes = append(w.Nodes, startClusterNode(t, w, st, clusterNodeNames[i], o))
	}
	w.A = w.Nodes[0]
	if len(w.Nodes) > 1 {
		w.B = w.Nodes[1]
	}
	return w
}

// clusterNodeSite is the rcns site of one node.
func clusterNodeSite(w *clusterWorld, store, node string, o clusterOpts) string {
	if o.NodeID != "" {
		node = o.NodeID
	}
	extra := store + "\t\tnode_id " + node + "\n" + o.Extra
	if o.Required != "" {
		extra += "\t\tstore_required " + o.Required + "\n"
	}
	mode := o.Mode
	if mode == "" {
		mode = "optimistic"
	}
	return fill(idvSite, "IDENTITY", o.Identity, "MODE", mode, "HOTEL", w.Hotel.URL,
		"AGENTS", o.Agents, "EXTRA", extra, "LEGACY", w.JS.URL)
}

// startClusterNode starts one node of w.
func startClusterNode(t testing.TB, w *clusterWorld, store, node string, o clusterOpts) *Gateway {
	t.Helper()
	text, sitePort, adminPort, agtpPort := renderCaddyfileDoor(t, clusterNodeSite(w, store, node, o), suiteDoor)
	if o.CatchAll {
		from := fmt.Sprintf("http://127.0.0.1:%d {", sitePort)
		if !strings.Contains(text, from) {
			t.Fatalf("the rendered Caddyfile has no site %q:\n%s", from, text)
		}
		text = strings.Replace(text, from, fmt.Sprintf("http://:%d {", sitePort), 1)
	}
	return launchText(t, text, sitePort, adminPort, agtpPort)
}

// node returns the gateway request i goes to: the nodes in turn.
func (w *clusterWorld) node(i int) *Gateway { return w.Nodes[i%len(w.Nodes)] }

// other returns the node that is not g (of two).
func (w *clusterWorld) other(g *Gateway) *Gateway {
	if g == w.A {
		return w.B
	}
	return w.A
}

// book sends the demo's BOOK /room to g.
func (w *clusterWorld) book(t testing.TB, g *Gateway, agent, scope string, kv ...string) *Resp {
	t.Helper()
	return g.Do(t, "BOOK", "/room", hdr(agent, scope, kv...), bookBody())
}

// bookResult is a BOOK's answer, or the error that kept it from one.
type bookResult struct {
	r   *Resp
	err error
}

// heldBook sends a keyed BOOK of agent on node A (over the suite's
// door) whose write step the hotel API holds for 3 s once done
// upstream, and returns once that write reached the hotel API: the
// request's headers, the reservation writes by guest before it, where
// its answer arrives, and release, which ends the hold (the caller
// defers it; it may be called more than once).
func (w *clusterWorld) heldBook(t *testing.T, agent, key string) (keyed map[string]string, before map[string]int, answered <-chan bookResult, release func()) {
	t.Helper()
	_, before = w.reservationWrites()
	w.Hotel.SlowAfter(3*time.Second, func(r *http.Request) bool { return r.Method == "POST" && r.URL.Path == "/reservations" })
	release = func() { w.Hotel.SlowAfter(0, nil) }
	held := false
	defer func() {
		if !held { // waitFor failed the test: end the hold here
			release()
		}
	}()
	keyed = hdr(agent, scopeAll, "Allow-RCNS", "true", "Idempotency-Key", key)
	ch := make(chan bookResult, 1)
	go func() { r, err := tryDoor(w.A, "BOOK", "/room", keyed, bookBody()); ch <- bookResult{r, err} }()
	waitFor(t, 10*time.Second, 20*time.Millisecond, "the write step to reach the hotel API", func() bool {
		_, now := w.reservationWrites()
		return now[demoGuest] > before[demoGuest]
	})
	held = true
	return keyed, before, ch, release
}

// reservationWrites returns how many reservation writes (POST
// /reservations) reached the hotel API from any node, by guest_id.
func (w *clusterWorld) reservationWrites() (total int, byGuest map[string]int) {
	byGuest = map[string]int{}
	for _, r := range w.Hotel.Requests() {
		if r.Method != "POST" || r.Path != "/reservations" {
			continue
		}
		total++
		var b struct {
			GuestID string `json:"guest_id"`
		}
		_ = json.Unmarshal(r.Body, &b)
		byGuest[b.GuestID]++
	}
	return total, byGuest
}

// noExecution checks, when the returned func runs, that no node made a
// call to the hotel API meanwhile.
func (w *clusterWorld) noExecution(t testing.TB) func() {
	t.Helper()
	n := w.Hotel.Count()
	return func() {
		t.Helper()
		if m := w.Hotel.Count(); m != n {
			t.Errorf("%d hotel upstream calls were made, want none", m-n)
		}
	}
}

// tryDoor is tryDo over the suite's door: a request Gateway.Do would
// send over the native AGTP/1.0 listener goes there (tryNative), any
// other over HTTP. Safe to call from any goroutine.
func tryDoor(g *Gateway, method, path string, h map[string]string, body any) (*Resp, error) {
	if g.AGTPAddr == "" || !agtpRequest(method, h) {
		return tryDo(g, method, path, h, body)
	}
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	return tryNative(g, method, path, h, raw)
}

// tryNative is Gateway.doNative without t: one request on a fresh
// connection, the answer read with the codec.
func tryNative(g *Gateway, method, path string, h map[string]string, raw []byte) (*Resp, error) {
	c, err := net.DialTimeout("tcp", g.AGTPAddr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(requestTimeout))
	var b bytes.Buffer
	fmt.Fprintf(&b, "AGTP/1.0 %s %s\r\nHost: %s\r\n", method, path, g.AGTPAddr)
	for k, v := range h {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if raw != nil {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(raw))
	}
	b.WriteString("\r\n")
	b.Write(raw)
	if _, err := c.Write(b.Bytes()); err != nil {
		return nil, err
	}
	resp, err := wire.ReadResponse(bufio.NewReader(c), wire.Limits{MaxHeaderBytes: 1 << 20}, 64<<20)
	if err != nil {
		return nil, fmt.Errorf("%s %s over agtp: %w", method, path, err)
	}
	return &Resp{Method: method, Path: path, Status: resp.Status, Header: resp.Header, Body: resp.Body, Reason: resp.Reason}, nil
}

// spread sends n requests at once, request i to w.node(i), each built by
// req(i), and returns the answers in order; a transport error fails the
// test.
func (w *clusterWorld) spread(t testing.TB, n int, req func(i int) (method, path string, h map[string]string, body any)) []*Resp {
	t.Helper()
	resps := make([]*Resp, n)
	errs := make([]error, n)
	var mu sync.Mutex
	concurrently(t, n, func(i int) {
		m, p, h, b := req(i)
		r, err := tryDoor(w.node(i), m, p, h, b)
		mu.Lock()
		resps[i], errs[i] = r, err
		mu.Unlock()
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d (node %d): %v", i, i%len(w.Nodes), err)
		}
	}
	return resps
}

// assertStoreUnavailable checks a 503 store-unavailable: the uniform
// body, retryable true, an integer Retry-After ≥ 1, and no contract
// named (nothing ran).
func assertStoreUnavailable(t testing.TB, r *Resp) {
	t.Helper()
	b := assertErrorBody(t, r, 503, "store-unavailable")
	if b["retryable"] != true {
		t.Errorf("503 store-unavailable is not retryable:\n%s", r)
	}
	ra := r.Header.Get("Retry-After")
	if secs, err := strconv.Atoi(ra); err != nil || secs < 1 {
		t.Errorf("503 store-unavailable Retry-After = %q, want an integer number of seconds ≥ 1:\n%s", ra, r)
	}
	assertNoContractFields(t, r)
}

// isStoreUnavailable reports whether r is a 503 store-unavailable.
func isStoreUnavailable(r *Resp) bool {
	return r.Status == 503 && str(r.JSON(), "reason") == "store-unavailable"
}
