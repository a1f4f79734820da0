package mcpdoor

import (
	"context"
	"net/http"
	"net/url"
	"slices"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
)

// The door's read-only MCP resources (docs/agent-guide-mcp.md
// "Resources"): the gateway's DISCOVER views an agent reads rather than
// calls, each answered by the engine as the caller's DISCOVER of it,
// with the caller's identity and grants; the manifest as the anonymous
// DISCOVER / (an identified one answers the built-ins' directory). A host can attach them to a
// conversation as context (the manifest, what the agent may call, what
// contracts it holds) without spending a tool call.
//
// rcns://negotiations is the caller's INSPECT target=negotiations
// kind=protocol-version: the newest records of its protocol version
// negotiations on the node that answers (a downgrade shows as an
// accepted record whose granted version differs from requested).
var mcpResources = []struct {
	uri, method, path, name, title, description string
	anonymous                                   bool
}{
	{"rcns://manifest", "DISCOVER", "/", "manifest", "AGTP manifest",
		"The gateway's AGTP manifest (DISCOVER /): its server id, methods, endpoints, policies and record keys.", true},
	{"rcns://contracts", "DISCOVER", "/contracts", "contracts", "Your contracts",
		"The contracts the gateway synthesized for your agent (DISCOVER /contracts): each synthesis_id, its pair, state and expiry.", false},
	{"rcns://patterns", "DISCOVER", "/patterns", "patterns", "Recipe patterns",
		"The (method, path) patterns the gateway's recipes can synthesize a contract for (DISCOVER /patterns), and the scopes each needs.", false},
	{"rcns://negotiations", "INSPECT", "/?target=negotiations&kind=protocol-version", "negotiations", "Your protocol version negotiations",
		"Your newest MCP protocol version negotiations on this gateway node (INSPECT target=negotiations kind=protocol-version): the version each initialize or server/discover asked for and the one it got.", false},
}

// undeclared are the methods of capabilities the door does not declare
// (tools and resources only): the SDK would answer their listings with
// empty lists, telling a client the capability exists.
var undeclared = map[string]bool{
	"prompts/list": true, "prompts/get": true, "completion/complete": true, "logging/setLevel": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
}

// recoverPanics answers a method whose handler panicked (a defect in
// the door or the engine) with JSON-RPC -32603 internal error, and logs
// the panic with its stack at ERROR: the SDK runs each message's
// handler on a goroutine of its own that recovers nothing, where a
// panic would end the whole process, every site and door with it.
// Outermost of the door's middleware, it covers every method the SDK
// dispatches (tools/call's handler recovers its own first, to answer a
// tool error).
func (d *Door) recoverPanics(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		defer func() {
			if p := recover(); p != nil {
				recovered.Log(d.e.Logger(), "panic in an MCP method", p, zap.String("method", method))
				if rq, _ := ctx.Value(mcpRequestKey{}).(*mcpRequest); rq != nil {
					rq.answered("", "internal-error")
				}
				res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal-error: the gateway reached no answer for this request"}
			}
		}()
		return next(ctx, method, req)
	}
}

// undeclaredWords is the -32601 message for method, one of undeclared.
func undeclaredWords(method string) string {
	return "method not found: " + method + " is not served: this server declares the tools and resources capabilities only (docs/agent-guide-mcp.md lists its methods)"
}

// declaredOnly answers a method of an undeclared capability with
// JSON-RPC -32601 method not found (MCP lifecycle: a server serves what
// its capabilities declare, and nothing else).
func declaredOnly(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if undeclared[method] {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: undeclaredWords(method)}
		}
		return next(ctx, method, req)
	}
}

// addResources registers the door's resources on s.
func (d *Door) addResources(s *mcp.Server) {
	for _, r := range mcpResources {
		method, path, anonymous := r.method, r.path, r.anonymous
		s.AddResource(&mcp.Resource{URI: r.uri, Name: r.name, Title: r.title, Description: r.description, MIMEType: "application/json"},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return d.readResource(ctx, req.Params.URI, method, path, anonymous)
			})
	}
}

// readResource answers resources/read of uri: the engine's answer to
// method (DISCOVER or INSPECT) of path as the caller (anonymous: as no
// one), its body the resource's JSON text. A refusal is a JSON-RPC
// error naming the AGTP reason.
func (d *Door) readResource(ctx context.Context, uri, method, path string, anonymous bool) (*mcp.ReadResourceResult, error) {
	rq, _ := ctx.Value(mcpRequestKey{}).(*mcpRequest)
	if rq == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the read did not come through the MCP door"}
	}
	u, _ := url.ParseRequestURI(path)
	in := rq.agtpRequest(ctx, method, path, u, rq.engineHeader())
	if anonymous {
		delete(in.Header, "Agent-Id")
		in.Verified = nil
	}
	resp := d.serveWithin(in)
	if resp == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: agtp.CallTimeout.Token + ": the read did not finish within " + agtp.FormatDuration(d.timeout())}
	}
	rq.answered(resp.RequestID, resp.Reason)
	if resp.Status != http.StatusOK {
		var b struct {
			Reason      string `json:"reason"`
			Explanation string `json:"explanation"`
		}
		_ = jsonv2.Unmarshal(resp.Body, &b)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: b.Reason + ": " + b.Explanation}
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(resp.Body)}}}, nil
}

// recordVersion records each protocol version negotiation in the
// caller's negotiation log (engine.RecordProtocolVersion, seed 003): an
// initialize (the version the client asked for, the one the SDK answered
// with: a 2026-07-28 or unknown request answered with 2025-11-25 is a
// visible downgrade) and a 2026-07-28 server/discover (the version in
// its _meta, granted when the discovery succeeded). Other requests of a
// stateless client are not negotiations and are not recorded.
func (d *Door) recordVersion(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "initialize" && method != "server/discover" {
			return res, err
		}
		rq, _ := ctx.Value(mcpRequestKey{}).(*mcpRequest)
		if rq == nil {
			return res, err
		}
		requested, granted := "", ""
		switch p := req.GetParams().(type) {
		case *mcp.InitializeParams:
			if p != nil {
				requested = p.ProtocolVersion
			}
			if r, ok := res.(*mcp.InitializeResult); ok && err == nil && r != nil {
				granted = r.ProtocolVersion
			}
		case *mcp.DiscoverParams:
			if p != nil {
				requested, _ = p.Meta[mcp.MetaKeyProtocolVersion].(string)
			}
			if r, ok := res.(*mcp.DiscoverResult); ok && err == nil && r != nil && slices.Contains(r.SupportedVersions, requested) {
				granted = requested
			}
		}
		d.e.RecordProtocolVersion(rq.agtpRequest(ctx, http.MethodPost, d.cfg.Path, nil, rq.header), method, requested, granted)
		return res, err
	}
}
