package mcpdoor

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddy-rcns/caddy-rcns/policy"
)

// Config is the MCP door (ARCHITECTURE.md "Doors and engine"): a
// path of this handler served as MCP Streamable HTTP (stateless, JSON
// responses), whose tools are the agent-callable Tier B endpoints and
// the recipes. Every tool call is one AGTP request through the same
// engine as the HTTP binding's: identity, scopes, locks, budgets,
// Idempotency-Key, contracts, records and metrics are shared.
type Config struct {
	// Path is the request path the door answers (exact match, query
	// ignored); a request for it never reaches the next handler. It
	// must start with "/" and be in the RFC 3986 normal form request
	// paths are compared in. Default "/mcp".
	Path string `json:"path,omitempty"`

	// IncludeTools lists tool-name globs (path.Match syntax: *, ?,
	// [a-z]); when set, only tools matching one of them are served.
	// Default: every tool.
	IncludeTools []string `json:"include_tools,omitempty"`

	// ExcludeTools lists tool-name globs of tools not served, applied
	// after IncludeTools. Default: none.
	ExcludeTools []string `json:"exclude_tools,omitempty"`

	// Rename maps a tool's generated name (docs/doors.md "Tool
	// names") to the name clients see: 1-128 characters of A-Z a-z 0-9
	// _ - . Include and exclude globs match the name clients see. A key
	// that names no tool is an error. Default: none.
	Rename map[string]string `json:"rename,omitempty"`

	// AllowedOrigins are the origins (scheme://host[:port], as a
	// browser sends Origin) allowed besides the request's own origin: a
	// request whose Origin header is neither is refused with 403
	// origin-refused (MCP transport, Origin validation). Requests
	// without Origin (non-browser clients) are not affected. Default:
	// none.
	AllowedOrigins []string `json:"allowed_origins,omitempty"`

	// DNSRebindingProtection refuses, with 403 host-refused, a request
	// that arrived on a loopback address but names a Host that is not
	// a loopback name (localhost, 127.0.0.1, [::1], with any port): the
	// shape of a DNS rebinding attack on a local gateway. Turn it off
	// only when a proxy on the same machine forwards requests with the
	// public Host. Default true.
	DNSRebindingProtection *bool `json:"dns_rebinding_protection,omitempty"`

	// MaxRequestBody bounds the HTTP request body of one MCP message,
	// in bytes (413 body-too-large above). Default: max_request_body.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`

	// MaxJSONDepth bounds the nesting of arrays and objects in an MCP
	// message, checked before it is parsed (400 invalid-json above): 1
	// to 1000 (MaxMCPJSONDepth, the go-sdk's own limit, past which it
	// refuses a message as malformed). Default 1000. A call's arguments
	// then meet the HTTP door's decoding limit too.
	MaxJSONDepth int `json:"max_json_depth,omitempty"`

	// MaxBatch bounds the messages of one JSON-RPC batch (a JSON array
	// of messages, which MCP revision 2025-03-26 allows and the SDK
	// runs concurrently, so one HTTP request may fan out to as many
	// upstream calls): a larger batch is refused with 400
	// batch-too-large before any of it runs. 1 to 1000. Default 16.
	// Clients of revision 2025-06-18 and later cannot send batches: the
	// door answers any with the SDK's own 400 before this limit is
	// checked.
	MaxBatch int `json:"max_batch,omitempty"`

	// Timeout bounds how long one tool call waits for its answer; past
	// it the call answers the tool error call-timeout while the work
	// goes on and its answer is kept for an Idempotency-Key replay (as
	// when an HTTP client disconnects). Default: composition_timeout
	// plus TimeoutGrace, so that a plan cut by its own deadline answers
	// its upstream_timeout (what ran, what did not) rather than a
	// call-timeout saying it goes on.
	Timeout engine.Duration `json:"timeout,omitempty"`

	// TaskAfter is the synchronous budget of a recipe tool's call from
	// a client that declared the io.modelcontextprotocol/tasks extension
	// (MCP 2026-07-28, docs/agent-guide-mcp.md "Tasks"): a call not
	// answered within it answers with a task (CreateTaskResult) and goes
	// on at the node that accepted it; the client polls tasks/get and
	// may tasks/cancel it. 0 (the default): no call answers with a task.
	TaskAfter engine.Duration `json:"task_after,omitempty"`

	// PageSize is the number of tools per tools/list page; a longer
	// listing carries nextCursor. Default 100.
	PageSize int `json:"page_size,omitempty"`

	// MaxResultText bounds the text content of a tool result (bytes):
	// the summary line, then the structured result serialized, cut at
	// this many bytes with a note saying so (the whole result stays in
	// structuredContent). Clients and agent frameworks that hand only
	// the text to the model (@ai-sdk/mcp, @openai/agents) then show it
	// the result. Default 16384; at least 256.
	MaxResultText int `json:"max_result_text,omitempty"`

	// MaxResultBytes bounds the result a tool result relays (bytes of
	// the result's JSON). An array result over it is cut at an item
	// boundary, with truncated: true, total_items, returned_items and a
	// note saying how to see the rest; any other result over it is the
	// tool error result-too-large (the call ran; its answer is in the
	// records). An endpoint's max_result_bytes overrides it for its
	// tool. Default 131072 (128 KiB); at least 256.
	MaxResultBytes int64 `json:"max_result_bytes,omitempty"`

	// MetaAttributionRecord puts each call's full Attribution-Record
	// (a JWS of about 800 bytes) into the result's _meta. Default
	// false: _meta carries the identifiers (audit id, response id,
	// status, attempt id) and the record goes on the HTTP answer's
	// Attribution-Record field, and to a call whose request _meta asks
	// for it (io.github.caddy-rcns/attribution-record: true). Agent
	// frameworks that pass _meta to the model (@langchain/mcp-adapters)
	// otherwise spend most of the answer on it.
	MetaAttributionRecord bool `json:"meta_attribution_record,omitempty"`

	// DisableFastPath sends every MCP message to the go-sdk. By default
	// the door answers one plain tools/call of a Tier B tool itself
	// (fastpath.go: a stateless, single JSON-RPC call on revision
	// 2025-06-18, 2025-11-25 or 2026-07-28, no session, no _meta beyond
	// the door's own keys and 2026-07-28's triple), decoding it once and
	// encoding the answer with the SDK's encoder, byte for byte what the
	// SDK answers; everything else
	// goes to the SDK. Turn it off to rule the fast path out when
	// diagnosing an MCP client's trouble. Default false (fast path on).
	DisableFastPath bool `json:"disable_fast_path,omitempty"`

	// TestAgent, for conformance suites that cannot send headers, makes
	// a caller without Agent-ID act as this registered agent (its name
	// or Agent-ID). UNSAFE outside tests: anyone who can reach the
	// listener acts as that agent. Only with identity header, and only
	// for requests whose local address is loopback (others are refused
	// as without it). Default: none.
	TestAgent string `json:"test_agent,omitempty"`

	// Identity narrows the handler's identity modes for this door: the
	// modes (space-separated) of the handler's identity list the MCP
	// door accepts, such as "oauth" on a gateway running "signature
	// oauth", so MCP hosts sign in with OAuth while AGTP agents keep
	// signing. A request verified by another mode is refused (401
	// identity-mode-refused). Default: the handler's list.
	Identity string `json:"identity,omitempty"`
}

// Defaults of the MCP door.
const (
	// DefaultMCPPath is Config.Path's default.
	DefaultMCPPath = "/mcp"
	// DefaultMCPPageSize is Config.PageSize's default.
	DefaultMCPPageSize = 100
	// MaxMCPJSONDepth is the deepest nesting an MCP message may have:
	// the go-sdk refuses deeper ones itself. Config.MaxJSONDepth's
	// default and largest value.
	MaxMCPJSONDepth = 1000
	// DefaultMCPMaxBatch is Config.MaxBatch's default.
	DefaultMCPMaxBatch = 16
	// MaxMCPMaxBatch is Config.MaxBatch's largest value.
	MaxMCPMaxBatch = 1000
)

// TimeoutGrace is what the default Timeout adds to composition_timeout
// (2 s): the time a plan cut at its deadline takes to answer.
const TimeoutGrace = 2 * time.Second

// SetDefaults fills the MCP door's unset knobs with their defaults,
// those it takes from the handler's configuration h (max_request_body,
// composition_timeout) included; h has its own defaults applied.
func (m *Config) SetDefaults(h *engine.Config) {
	if m.Path == "" {
		m.Path = DefaultMCPPath
	}
	if m.MaxRequestBody == 0 {
		m.MaxRequestBody = h.MaxRequestBody
	}
	if m.MaxJSONDepth == 0 {
		m.MaxJSONDepth = MaxMCPJSONDepth
	}
	if m.Timeout == 0 {
		m.Timeout = h.CompositionTimeout + engine.Duration(TimeoutGrace)
	}
	if m.PageSize == 0 {
		m.PageSize = DefaultMCPPageSize
	}
	if m.MaxBatch == 0 {
		m.MaxBatch = DefaultMCPMaxBatch
	}
	if m.MaxResultText == 0 {
		m.MaxResultText = DefaultMCPMaxResultText
	}
	if m.MaxResultBytes == 0 {
		m.MaxResultBytes = DefaultMCPMaxResultBytes
	}
}

// DefaultMCPMaxResultBytes is MaxResultBytes's default (bytes).
const DefaultMCPMaxResultBytes = 128 << 10

// DefaultMCPMaxResultText is MaxResultText's default (bytes).
const DefaultMCPMaxResultText = 16384

// dnsRebindingProtection is DNSRebindingProtection with its default.
func (m *Config) dnsRebindingProtection() bool {
	return m.DNSRebindingProtection == nil || *m.DNSRebindingProtection
}

// Validate checks the MCP door's values; identity is the handler's
// identity mode.
func (m *Config) Validate(identity string) error {
	if !strings.HasPrefix(m.Path, "/") || strings.ContainsAny(m.Path, "?#") {
		return fmt.Errorf("rcns: mcp path %q must be an absolute path without query or fragment", m.Path)
	}
	if n, err := policy.NormalizePath(m.Path); err != nil || n != m.Path {
		return fmt.Errorf("rcns: mcp path %q is not in the RFC 3986 normal form request paths are compared in", m.Path)
	}
	for _, k := range []struct {
		name     string
		negative bool
	}{{"max_request_body", m.MaxRequestBody < 0}, {"max_json_depth", m.MaxJSONDepth < 0}, {"timeout", m.Timeout < 0}, {"task_after", m.TaskAfter < 0}, {"page_size", m.PageSize < 0}, {"max_batch", m.MaxBatch < 0}} {
		if k.negative {
			return fmt.Errorf("rcns: mcp %s must not be negative (leave it out for the default)", k.name)
		}
	}
	if m.TaskAfter > 0 && m.Timeout > 0 && m.TaskAfter >= m.Timeout {
		return fmt.Errorf("rcns: mcp task_after %s must be below timeout %s: a call answers with a task only before its timeout", time.Duration(m.TaskAfter), time.Duration(m.Timeout))
	}
	if m.MaxJSONDepth > MaxMCPJSONDepth {
		return fmt.Errorf("rcns: mcp max_json_depth %d is above %d, the MCP SDK's own limit (it refuses deeper messages as malformed)", m.MaxJSONDepth, MaxMCPJSONDepth)
	}
	if m.MaxResultBytes != 0 && m.MaxResultBytes < 256 {
		return fmt.Errorf("rcns: mcp max_result_bytes must be at least 256 bytes, not %d", m.MaxResultBytes)
	}
	if m.MaxResultText != 0 && m.MaxResultText < 256 {
		return fmt.Errorf("rcns: mcp max_result_text must be at least 256 bytes, not %d", m.MaxResultText)
	}
	if m.MaxBatch > MaxMCPMaxBatch {
		return fmt.Errorf("rcns: mcp max_batch %d is above %d", m.MaxBatch, MaxMCPMaxBatch)
	}
	for _, list := range []struct {
		name  string
		globs []string
	}{{"include_tools", m.IncludeTools}, {"exclude_tools", m.ExcludeTools}} {
		for i, g := range list.globs {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				return fmt.Errorf("rcns: mcp %s[%d] %q is not a name glob (path.Match syntax: *, ?, [a-z])", list.name, i, g)
			}
		}
	}
	for from, to := range m.Rename {
		if !validToolName(to) {
			return fmt.Errorf("rcns: mcp rename %s: %q is not a tool name (1-128 characters of A-Z a-z 0-9 _ - .)", from, to)
		}
	}
	for i, o := range m.AllowedOrigins {
		if err := checkOrigin(o); err != nil {
			return fmt.Errorf("rcns: mcp allowed_origins[%d] %q %v", i, o, err)
		}
	}
	if m.Identity != "" {
		door, err := engine.ParseIdentityModes(m.Identity)
		if err != nil {
			return fmt.Errorf("rcns: mcp identity: %v", err)
		}
		for _, d := range door {
			if !engine.HasIdentityMode(identity, d) {
				return fmt.Errorf("rcns: mcp identity %s is not one of the handler's identity modes (%s): a door may only narrow the list", d, identity)
			}
		}
	}
	if m.TestAgent != "" && identity != engine.IdentityHeader {
		return fmt.Errorf("rcns: mcp test_agent works only with identity header (it stands in for the Agent-ID header on loopback); this gateway runs identity %s", identity)
	}
	return nil
}

// checkOrigin refuses an allowed_origins entry no browser sends as
// Origin: it must be scheme://host[:port], lower case, without path,
// query, fragment or user information (RFC 6454 serialization).
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return fmt.Errorf("is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must start with http:// or https://")
	case u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "/"):
		return errors.New("must be scheme://host[:port] only, as a browser sends Origin")
	case strings.ToLower(o) != o:
		return errors.New("must be lower case, as a browser sends Origin")
	}
	return nil
}
