// Package mcpdoor is the MCP door (docs/doors.md "MCP door"): the
// engine's Tier B endpoints and recipes as MCP tools over Streamable
// HTTP, served with the MCP Go SDK in stateless mode. Each HTTP request
// is identified once (engine.VerifyTransport), each tool call becomes an
// agtp.Request served by engine.Serve, and refusals are the engine's
// (engine.Refuse), so an agent gets the same answer on every door.
package mcpdoor

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/httpdoor"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/httpbody"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
)

// Door is the MCP door (ARCHITECTURE.md "Doors and engine"): MCP
// over Streamable HTTP, stateless with JSON responses (the official
// go-sdk), at one path of the rcns handler. Before the SDK reads a
// byte of an MCP message the door checks the transport (Host, Origin,
// body size and nesting) and the caller's identity on the HTTP request,
// in the engine's identity mode; each tool call is then one
// agtp.Request through engine.serve (mcpcall.go).
type Door struct {
	e   *engine.Engine
	cfg *Config
	// tools are the served tools, sorted by name.
	tools []*mcpTool
	// oauth: the engine runs identity oauth (a bearer token may name
	// the agent; 401s carry the engine's Bearer challenge).
	oauth bool
	// modes are cfg.Identity's modes (nil: the handler's list, not
	// narrowed), parsed once.
	modes []string
	// testAgent is the Agent-ID of cfg.TestAgent ("" without it).
	testAgent string
	origins   map[string]bool
	// wellKnown are the discovery paths the door answers itself
	// (wellknown.go).
	wellKnown map[string]wellKnownKind
	sdk       *mcp.StreamableHTTPHandler
	impl      *mcp.Implementation
	log       *slog.Logger // the SDK's log: warnings and errors into the handler's
	// servers maps each agent seen (its Agent-ID) to the SDK server of
	// the tools it sees; the registry bounds it.
	servers sync.Map // Agent-ID → *agentServer
	// shared holds those servers by their set of tools, so agents whose
	// grants show the same tools share one.
	mu     sync.Mutex
	shared map[string]*agentServer
	// fastServed counts the requests the fast path answered
	// (fastpath.go; read by its tests).
	fastServed atomic.Int64
	// polls polls the store for the door's running tasks (taskpoll.go).
	polls taskPoller
}

// agentServer is the SDK server of one set of visible tools, with
// those tools by name (the fast path's lookup, fastpath.go).
type agentServer struct {
	s       *mcp.Server
	visible map[string]*mcpTool
}

// New builds the door of e for cfg (defaults applied): its tools
// (refusing name collisions) and the SDK handler.
func New(e *engine.Engine, cfg *Config) (*Door, error) {
	if err := cfg.Validate(e.Identity); err != nil {
		return nil, err
	}
	d := &Door{e: e, cfg: cfg, origins: map[string]bool{}, wellKnown: wellKnownPaths(cfg.Path, e.ResourceMetadataURL()), shared: map[string]*agentServer{},
		oauth: engine.HasIdentityMode(e.Identity, engine.IdentityOAuth)}
	if cfg.Identity != "" {
		d.modes, _ = engine.ParseIdentityModes(cfg.Identity) // checked by Validate
	}
	for _, o := range cfg.AllowedOrigins {
		d.origins[o] = true
	}
	if cfg.TestAgent != "" {
		for _, id := range e.AgentRegistry().IDs() {
			a, _ := e.AgentRegistry().Lookup(id)
			if a.ID == cfg.TestAgent || a.Name == cfg.TestAgent {
				if d.testAgent != "" {
					return nil, fmt.Errorf("rcns: mcp test_agent %q names more than one agent; give its Agent-ID", cfg.TestAgent)
				}
				d.testAgent = a.ID
			}
		}
		if d.testAgent == "" {
			return nil, fmt.Errorf("rcns: mcp test_agent %q is neither the name nor the Agent-ID of a registered agent", cfg.TestAgent)
		}
		e.Logger().Warn("mcp test_agent is set: loopback MCP callers without Agent-ID act as this agent; never use it outside tests",
			zap.String("test_agent", cfg.TestAgent))
	}
	tools, err := buildTools(e, cfg)
	if err != nil {
		return nil, err
	}
	d.tools = tools
	d.impl = &mcp.Implementation{Name: e.ServerID, Title: "caddy-rcns AGTP gateway", Version: moduleVersion()}
	// The SDK logs every stateless session at info; its warnings and
	// errors go to the handler's log.
	// Bounded (Engine.BudgetCore): a malformed message an agent sends
	// may make the SDK log, and no agent may raise the log volume.
	if core, err := zapcore.NewIncreaseLevelCore(e.BudgetCore(e.Logger().Core(), "mcp-sdk"), zapcore.WarnLevel); err == nil {
		d.log = slog.New(zapslog.NewHandler(core, zapslog.WithName("mcp")))
	}
	d.sdk = mcp.NewStreamableHTTPHandler(d.server, &mcp.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true, Logger: d.log,
		// The door bounds the body (MaxRequestBody) and checks Host
		// itself, answering with the AGTP error body.
		MaxRequestBodyBytes:        cfg.MaxRequestBody,
		DisableLocalhostProtection: true,
	})
	return d, nil
}

// moduleVersion is the caddy-rcns module's version in the running
// binary, "(devel)" in a build from a checkout.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == "github.com/caddy-rcns/caddy-rcns" && bi.Main.Version != "" {
			return bi.Main.Version
		}
		for _, m := range bi.Deps {
			if m.Path == "github.com/caddy-rcns/caddy-rcns" {
				return m.Version
			}
		}
	}
	return "(devel)"
}

// ManifestEntry is the manifest's hosted_protocols entry for the MCP
// door: where it is and which MCP revisions it speaks.
func ManifestEntry(cfg *Config) map[string]any {
	return map[string]any{"protocol": "mcp", "transport": "streamable-http", "path": cfg.Path,
		"protocol_versions": mcp.SupportedProtocolVersions()}
}

// mcpRequest is what the door learnt of one HTTP request before the SDK
// parsed it, handed to the tool handlers through the request context
// (the SDK's stateless mode runs each request's calls under it).
type mcpRequest struct {
	agent    *policy.Agent
	ident    *agtp.Identity
	loopback bool
	tls      *tls.ConnectionState
	host     string
	header   http.Header
	// mu guards out, the fields each call adds to the HTTP answer
	// (Attribution-Record, Audit-ID).
	mu  sync.Mutex
	out []agtp.Field
	// sum is what the access log line names (Summary); guarded by mu.
	sum Summary
	// taskable: the HTTP request is one tools/call whose client declared
	// the tasks extension (tasks.go); task is the task it became
	// (guarded by mu).
	taskable bool
	task     *createdTask
	// status replaces the 200 the SDK answers with (0: none): a tasks
	// method's header mismatch is a 400 (tasks.go). Guarded by mu.
	status int
}

// answerStatus makes code the HTTP status of rq's answer in place of
// the SDK's 200 (mcpWriter).
func (rq *mcpRequest) answerStatus(code int) {
	rq.mu.Lock()
	rq.status = code
	rq.mu.Unlock()
}

// person is the person the request acts for when that is not its
// agent's own owner (identity oauth: the token's sub), else "". Tasks
// are that person's (store.Task.OwnerID).
func (rq *mcpRequest) person() string {
	if rq.ident != nil && rq.ident.OwnerID != "" && rq.ident.OwnerID != rq.agent.OwnerID {
		return rq.ident.OwnerID
	}
	return ""
}

// called notes the call of the tool named name, for the access log.
func (rq *mcpRequest) called(name string) {
	rq.mu.Lock()
	rq.sum.Tools = append(rq.sum.Tools, name)
	rq.mu.Unlock()
}

// answered notes the engine answer of one call (its request id, and
// its reason when a refusal; reason alone for a refusal the engine did
// not answer), for the access log.
func (rq *mcpRequest) answered(requestID, reason string) {
	rq.mu.Lock()
	if requestID != "" {
		rq.sum.RequestIDs = append(rq.sum.RequestIDs, requestID)
	}
	if reason != "" && !slices.Contains(rq.sum.Reasons, reason) {
		rq.sum.Reasons = append(rq.sum.Reasons, reason)
	}
	rq.mu.Unlock()
}

// summary is a copy of what rq noted.
func (rq *mcpRequest) summary() Summary {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	return Summary{Tools: slices.Clone(rq.sum.Tools), RequestIDs: slices.Clone(rq.sum.RequestIDs), Reasons: slices.Clone(rq.sum.Reasons)}
}

type mcpRequestKey struct{}

// addOut adds response fields for the HTTP answer.
func (rq *mcpRequest) addOut(fs ...agtp.Field) {
	rq.mu.Lock()
	rq.out = append(rq.out, fs...)
	rq.mu.Unlock()
}

// ServeHTTP answers one HTTP request for the MCP path (Serve, its
// Summary dropped).
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.Serve(w, r)
}

// Summary is what the access log line of one HTTP request to the MCP
// path names beyond the HTTP request itself: the tools it called and
// the engine answers it got. Its slices are nil when empty.
type Summary struct {
	// Tools are the names of the tools called, in the order the calls
	// began (a JSON-RPC batch calls several).
	Tools []string
	// RequestIDs are the request ids of the engine answers: one per
	// tool call, or the one of the door's own refusal (as
	// agtp.Response.RequestID).
	RequestIDs []string
	// Reasons are the reason tokens of the refusals among those
	// answers, each once.
	Reasons []string
}

// Serve answers one HTTP request for the MCP path: transport and
// identity checks, then the SDK (spec: MCP Streamable HTTP, stateless).
// It returns what the request's access log line names.
func (d *Door) Serve(w http.ResponseWriter, r *http.Request) Summary {
	loopback := httpdoor.LocalIsLoopback(r)
	if d.cfg.dnsRebindingProtection() && loopback && !httpdoor.LoopbackHost(r.Host) {
		return d.refuse(w, r, agtp.HostRefused.New("this MCP endpoint is on a loopback address and answers only Host localhost, 127.0.0.1 or [::1]: another Host is how DNS rebinding reaches a local server"), nil, false)
	}
	if o, ok := r.Header["Origin"]; ok {
		if !d.originAllowed(o, r) {
			return d.refuse(w, r, agtp.OriginRefused.New("the Origin of this request is neither this gateway's own nor one of the mcp block's allowed_origins"), nil, false)
		}
		if allowCORS(w, r, o[0]) {
			return Summary{}
		}
	}
	if r.Method == http.MethodPost {
		// A coded body (gzip, br, …) would be read as JSON as sent: 415
		// naming what is accepted, as on the AGTP doors (RFC 9110
		// §15.5.16, §12.5.3).
		if e := agtp.CheckContentEncoding(r.Header); e != nil {
			w.Header().Set("Accept-Encoding", "identity")
			return d.refuse(w, r, e, nil, false)
		}
	}
	if r.ContentLength > d.cfg.MaxRequestBody {
		return d.refuse(w, r, agtp.BodyTooLarge.WithFields(fmt.Sprintf("the MCP message is %d bytes; the limit is %d bytes", r.ContentLength, d.cfg.MaxRequestBody),
			map[string]any{"limit_bytes": d.cfg.MaxRequestBody}), nil, false)
	}
	var body []byte
	if r.ContentLength != 0 && r.Body != nil {
		raw, err := httpbody.Read(r.Body, r.ContentLength, d.cfg.MaxRequestBody)
		if err != nil && !(r.ContentLength < 0 && err == io.EOF) {
			if l := d.e.AgentLog(r.Header.Get("Agent-ID"), "mcp-body-read-failed"); l != nil {
				l.Info("MCP request body read failed", zap.Int("read_bytes", len(raw)), zap.Int64("content_length", r.ContentLength), zap.Error(err))
			}
			return d.refuse(w, r, agtp.BodyReadError(err, len(raw), r.ContentLength), nil, false)
		}
		if int64(len(raw)) > d.cfg.MaxRequestBody {
			return d.refuse(w, r, agtp.BodyTooLarge.WithFields(fmt.Sprintf("the MCP message exceeds %d bytes", d.cfg.MaxRequestBody),
				map[string]any{"limit_bytes": d.cfg.MaxRequestBody}), nil, false)
		}
		body = raw
	}
	rq, e := d.identify(r, body, loopback)
	if e != nil {
		sum := d.refuse(w, r, e, body, true)
		if l := d.e.AgentLog(r.Header.Get("Agent-ID"), e.Reason); l != nil {
			l.Info("MCP identity refused", zap.String("request_id", sum.RequestIDs[0]), zap.String("agent_id", textcut.Clip(r.Header.Get("Agent-ID"))),
				zap.String("mode", d.e.Identity), zap.String("reason", e.Reason))
		}
		return sum
	}
	// Who the gateway took the caller to be, as on the other doors'
	// answers to an identified agent (spec §4; cases/02).
	// Written into the map, not with Set, which would respell them
	// "Owner-Id" (the AGTP spelling is the wire's; wire.Spelling).
	hd := w.Header()
	if owner := cmp.Or(rq.ident.OwnerID, rq.agent.OwnerID); owner != "" {
		hd["Owner-ID"] = []string{owner}
	}
	hd["Agent-ID"] = []string{rq.agent.ID} // as the other doors echo it; under identity oauth the token named it
	hd["Trust-Tier"] = []string{strconv.Itoa(int(rq.agent.TrustTier))}
	hd["Verification-Path"] = []string{engine.VerificationPath(rq.ident.VerificationPath)}
	if r.Method == http.MethodPost {
		if msg, status := headerFault(r.Header); msg != "" { // envelope.go
			http.Error(w, msg, status)
			return Summary{}
		}
	}
	// What judges the message (its depth, the scope challenge of its
	// call, its batch's size, the envelope rules) waits for the SDK's
	// transport checks: a request the SDK refuses at the transport (405,
	// 415, 400) it refuses whatever its body holds, reading none of it.
	sdkReads := sdkTransportOK(r)
	if sdkReads {
		if over, at := agtp.DeeperThan(body, d.cfg.MaxJSONDepth); over {
			return d.refuseAs(w, r, rq, agtp.InvalidJSON.WithFields(fmt.Sprintf("the MCP message nests deeper than %d levels (at byte %d)", d.cfg.MaxJSONDepth, at),
				map[string]any{"limit_depth": d.cfg.MaxJSONDepth}), body, true)
		}
		n, whole := batchOf(body)
		if n > 0 && !sdkBatches(r) {
			// Whole and valid (UTF-8, surrogates; names may repeat,
			// the batch refusal comes first for those): anything else
			// is the envelope rules' -32700, as under every revision.
			if whole && jsontext.Value(body).IsValid(jsontext.AllowDuplicateNames(true)) {
				// A batch under a revision without batches: the SDK's
				// refusal of a batch, whatever its values are (nothing
				// below judges them: not max_batch, not the envelope
				// rules), written here because the SDK would first
				// decode every one of them.
				refuseBatch(w, r)
				return Summary{}
			}
			n = 0 // not one JSON value: the envelope rules' -32700 below, as under every revision
		}
		if e := d.stepUp(rq, body); e != nil {
			return d.refuseAs(w, r, rq, e, body, true)
		}
		if n > d.cfg.MaxBatch {
			return d.refuseAs(w, r, rq, agtp.BatchTooLarge.WithFields(fmt.Sprintf("the JSON-RPC batch holds %d messages; the limit is %d (send fewer per request, or one message each)", n, d.cfg.MaxBatch),
				map[string]any{"limit_messages": d.cfg.MaxBatch}), body, true)
		}
	}
	if d.fastCall(w, r, rq, body) { // fastpath.go: one plain tools/call of a Tier B tool or a recipe
		return rq.summary()
	}
	if len(body) > 0 && sdkReads {
		// What the fast path declined meets the envelope rules before
		// anything else reads it (envelope.go); a request the SDK
		// refuses at the transport (415, 405, 400) it refuses first, as
		// it would without these rules.
		if f := envelopeFault(body); f != nil {
			writeFault(w, f)
			return Summary{Reasons: []string{f.reason()}}
		}
		if paramsFault(w, r.Header.Get("Mcp-Protocol-Version"), body) {
			return Summary{}
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if d.taskCandidate(body) {
		// Its answer may become a CreateTaskResult (tasks.go).
		rq.taskable = true
		tw := &taskWriter{hd: http.Header{}}
		mw := &mcpWriter{ResponseWriter: tw, rq: rq, body: body}
		d.sdk.ServeHTTP(mw, r.WithContext(context.WithValue(r.Context(), mcpRequestKey{}, rq)))
		mw.finish()
		rq.mu.Lock()
		ct := rq.task
		rq.mu.Unlock()
		tw.flush(w, ct)
		return rq.summary()
	}
	mw := &mcpWriter{ResponseWriter: w, rq: rq, body: body, xcto: w.Header()["X-Content-Type-Options"]}
	d.sdk.ServeHTTP(mw, r.WithContext(context.WithValue(r.Context(), mcpRequestKey{}, rq)))
	mw.finish()
	return rq.summary()
}

// batchLen is the number of messages in a JSON-RPC batch (a JSON array
// at the top of body), counted with a streaming decoder after the depth
// check: 0 when body is not an array (a single message). A malformed
// array counts the elements read before the fault: the SDK refuses
// the rest.
func batchLen(body []byte) int {
	n, _ := batchOf(body)
	return n
}

// batchOf is batchLen, and whether body is that array whole: closed,
// with nothing but whitespace after it (false for a malformed or
// truncated array, or one followed by more data, which the envelope
// rules refuse as not one JSON value).
func batchOf(body []byte) (n int, whole bool) {
	i := bytes.IndexFunc(body, func(r rune) bool { return r != ' ' && r != '\t' && r != '\r' && r != '\n' })
	if i < 0 || body[i] != '[' {
		return 0, false
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body[i:]), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if _, err := dec.ReadToken(); err != nil { // '['
		return 0, false
	}
	for dec.PeekKind() != ']' && dec.PeekKind() != 0 {
		if err := dec.SkipValue(); err != nil {
			return n, false
		}
		n++
	}
	if _, err := dec.ReadToken(); err != nil { // ']'
		return n, false
	}
	_, err := dec.ReadToken()
	return n, err == io.EOF
}

// identify proves who sent r (its body read to the end) in the
// engine's identity mode, as every door does (verifyTransport), and
// resolves the agent in the registry; refusals carry the reasons of the
// other doors.
func (d *Door) identify(r *http.Request, body []byte, loopback bool) (*mcpRequest, *agtp.Error) {
	e := d.e
	ids := r.Header["Agent-Id"]
	if len(ids) > 1 {
		return nil, agtp.DuplicateHeader.New("the Agent-ID header appears more than once; send it once")
	}
	if e.Identity == engine.IdentityHeader && !loopback {
		return nil, agtp.IdentityModeRefused.New("this gateway trusts the Agent-ID header only on loopback; configure a verified identity mode")
	}
	agentID := ""
	if len(ids) == 1 {
		agentID = ids[0]
	} else if d.testAgent != "" && loopback && len(r.Header["Authorization"]) == 0 {
		agentID = d.testAgent
	}
	if agentID == "" && !d.oauth {
		return nil, agtp.AgentUnauthenticated.New("an MCP request needs an Agent-ID header (with the proof the identity mode asks for) on every HTTP request")
	}
	if agentID != "" && !policy.ValidAgentID(agentID) {
		// Malformed is 400 whatever the identity mode (spec §3), before
		// any proof is checked, as on the AGTP doors.
		return nil, agtp.InvalidCanonicalID.New("Agent-ID is not a canonical Agent-ID (64 lowercase hexadecimal characters).")
	}
	view := &agtp.Request{Binding: agtp.BindingMCP, Method: r.Method, Target: r.RequestURI, URL: r.URL, Host: r.Host,
		Header: r.Header, ContentLength: int64(len(body)), TLS: r.TLS, Loopback: loopback, Context: r.Context()}
	id, err := e.VerifyTransport(view, body, agentID)
	if err != nil {
		return nil, err
	}
	if d.modes != nil && !slices.Contains(d.modes, id.VerificationPath) {
		return nil, agtp.IdentityModeRefused.Newf("the MCP door accepts identity %s only, not %s (the gateway's other doors take it)", d.cfg.Identity, id.VerificationPath)
	}
	caller, ref := policy.ResolveCaller(e.AgentRegistry(), id.AgentID, "", "", false)
	if ref != nil {
		return nil, agtp.FromRefusal(ref)
	}
	return &mcpRequest{agent: caller.Agent, loopback: loopback, tls: r.TLS, host: r.Host, header: r.Header, ident: id}, nil
}

// originAllowed reports whether the Origin field values vals are
// allowed: exactly one value, either the request's own origin (its
// scheme and Host) or one of allowed_origins.
func (d *Door) originAllowed(vals []string, r *http.Request) bool {
	if len(vals) != 1 {
		return false
	}
	o := strings.ToLower(vals[0])
	if d.origins[o] {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(u.Host, r.Host)
}

// refuse answers an HTTP request for the MCP path that the door refused
// before the SDK read it, as the other doors refuse: the engine's
// answer (spec §19 body, the AGTP response fields, an Attribution-Record
// on the anonymous chain) for the HTTP request seen as an AGTP one.
// body is the request body when it was read to its end; otherwise an
// HTTP/1 connection is closed after the answer.
func (d *Door) refuse(w http.ResponseWriter, r *http.Request, e *agtp.Error, body []byte, bodyRead bool) Summary {
	return d.refuseAs(w, r, nil, e, body, bodyRead)
}

// refuseAs is refuse for the caller rq identified (nil before identify):
// as on the other doors, the answer echoes the well-formed Agent-ID,
// Request-ID and Task-ID, and once the caller is identified it names
// its owner, trust tier and verification path and its
// Attribution-Record names the agent.
func (d *Door) refuseAs(w http.ResponseWriter, r *http.Request, rq *mcpRequest, e *agtp.Error, body []byte, bodyRead bool) Summary {
	in := &agtp.Request{Binding: agtp.BindingMCP, Method: r.Method, Target: r.RequestURI, URL: r.URL, Host: r.Host,
		Header: r.Header, ContentLength: r.ContentLength, TLS: r.TLS, Context: r.Context()}
	how := engine.Refusal{Body: body, BodyRead: bodyRead}
	if rq != nil {
		how.Agent = rq.agent
	}
	resp := d.e.Refuse(in, e, how)
	if resp.Status == http.StatusUnauthorized && !d.oauth { // identity oauth: the engine's Bearer challenge
		// RFC 9110 §11.6.1: a 401 carries a challenge (challenge says
		// which and why). Spelled as RFC 9110 spells it.
		w.Header()["WWW-Authenticate"] = []string{d.challenge(r)}
	}
	httpdoor.Write(w, r, resp)
	if resp.Close {
		httpdoor.Drain(d.e.RefusedBodyDrainBounds(), w, r) // as the HTTP door (cases/05)
	}
	return Summary{RequestIDs: []string{resp.RequestID}, Reasons: []string{resp.Reason}}
}

// server is the SDK server for the HTTP request r: the one whose tools
// are those the identified agent's grant holds the scopes of.
func (d *Door) server(r *http.Request) *mcp.Server {
	rq, _ := r.Context().Value(mcpRequestKey{}).(*mcpRequest)
	if rq == nil {
		return nil // not through ServeHTTP: the SDK answers 400
	}
	return d.agentServer(rq).s
}

// agentServer is the SDK server of the tools rq's agent sees, built on
// the agent's first request and kept.
func (d *Door) agentServer(rq *mcpRequest) *agentServer {
	if s, ok := d.servers.Load(rq.agent.ID); ok {
		return s.(*agentServer)
	}
	var key strings.Builder
	var visible []*mcpTool
	for i, t := range d.tools {
		if len(rq.agent.Scopes.Missing(t.scopes)) == 0 {
			visible = append(visible, t)
			key.WriteString(strconv.Itoa(i) + ",")
		}
	}
	d.mu.Lock()
	s := d.shared[key.String()]
	if s == nil {
		s = &agentServer{s: d.newServer(visible), visible: make(map[string]*mcpTool, len(visible))}
		for _, t := range visible {
			s.visible[t.name] = t
		}
		d.shared[key.String()] = s
	}
	d.mu.Unlock()
	d.servers.Store(rq.agent.ID, s)
	return s
}

// newServer builds an SDK server serving tools.
func (d *Door) newServer(tools []*mcpTool) *mcp.Server {
	s := mcp.NewServer(d.impl, &mcp.ServerOptions{
		Logger:   d.log,
		PageSize: d.cfg.PageSize,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Resources: &mcp.ResourceCapabilities{},
			Extensions: map[string]any{TasksExtension: map[string]any{}}},
		Instructions: d.instructions(),
		// A listing depends on the caller's grant: private, and stale
		// at once (a reload may change it).
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.CacheScope, c.TTLMs = "private", 0
		},
	})
	for _, t := range tools {
		s.AddTool(t.def, d.handler(t))
	}
	d.addResources(s)
	// The fast path (fastpath.go) answers a plain tools/call of a Tier
	// B tool or a recipe without this middleware: one added here that
	// acts on tools/call must make fastCall decline the calls it acts on
	// (and TestMCPFastPathDifferential's corpus hold one of them).
	d.addTasksMethods(s)
	s.AddReceivingMiddleware(d.recoverPanics, declaredOnly, d.recordVersion)
	return s
}

// instructions tell an MCP client's model how to use the tools.
func (d *Door) instructions() string {
	id := "Send Agent-ID as an HTTP header on every request"
	switch d.e.Identity {
	case engine.IdentityOAuth:
		id = "Send your OAuth access token (Authorization: Bearer) on every request; its scopes are the ones you claim"
	case engine.IdentitySignature:
		id += ", signed (RFC 9421, covering the body's Content-Digest)"
	case engine.IdentityMTLS:
		id += ", over TLS with the agent's client certificate"
	}
	if d.e.Identity != engine.IdentityOAuth {
		id += ", and Authority-Scope with the scopes a tool names"
	}
	return fmt.Sprintf("Tools of the AGTP gateway %s: each calls one AGTP endpoint (Tier B) or recipe (Tier C) under your agent's identity, scopes and budgets. "+
		"%s. A recipe tool's first call may answer outcome \"preview\" and run nothing: call it again with the same arguments and the synthesis_id to run it. "+
		"To make a call safe to repeat, send an Idempotency-Key HTTP header or _meta[%q]. A failed call answers isError with error.code, retryable and retry_after_seconds.",
		d.e.ServerID, id, MCPMetaIdempotencyKey)
}

// timeout is the door's bound on one tool call.
func (d *Door) timeout() time.Duration { return time.Duration(d.cfg.Timeout) }

// stepUp is the MCP authorization rules' scope challenge (MCP
// 2026-07-28, "Scope challenge handling"; RFC 6750 §3.1): a single
// tools/call whose tool needs a scope the caller's agent holds but its
// access token does not carry is refused at the HTTP level, 403
// insufficient-scope with WWW-Authenticate naming every scope the tool
// needs, so an MCP client asks its authorization server for them and
// retries. Nil for callers whose grants no token bounds, for other
// messages and batches (each call then meets the engine's own check),
// and for tools the agent was never granted (the call's 455 tells).
func (d *Door) stepUp(rq *mcpRequest, body []byte) *agtp.Error {
	if !rq.ident.Bounded || !bytes.Contains(body, []byte("tools/call")) {
		return nil // no token bounds the grants, or no call: no second decode
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if decodeAsSDK(body, &msg) != nil || msg.Method != "tools/call" {
		return nil
	}
	i, found := slices.BinarySearchFunc(d.tools, msg.Params.Name, func(t *mcpTool, name string) int { return strings.Compare(t.name, name) })
	if !found {
		return nil
	}
	ceiling, _ := policy.ParseScopes(rq.ident.Scopes)
	c := &policy.Caller{Agent: rq.agent, Bounded: true, Ceiling: ceiling}
	if ref := policy.CheckRequiredScopes(c, d.tools[i].scopes); ref != nil && ref.Reason == agtp.InsufficientScope.Token {
		return agtp.FromRefusal(ref)
	}
	return nil
}
