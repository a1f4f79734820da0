package caddymodule

import (
	"net/http"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/mcpdoor"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// The access log line of an AGTP request names what Caddy's own fields
// cannot: the request id every engine log line about the request
// carries (the join key: the Request-ID the agent sent, or the one the
// gateway minted, as the Attribution-Record names it), and the reason
// token of a refusal. On the MCP path it names the tools called and
// the id of each call's engine answer. docs/operator-guide.md
// ("Logs") lists the fields.

// extraLogFields is the access log's extra fields of r
// (caddyhttp.ExtraLogFields), nil outside a Caddy server.
func extraLogFields(r *http.Request) *caddyhttp.ExtraLogFields {
	x, _ := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields)
	return x
}

// noteAccess puts request_id and, on a refusal, reason on the access
// log line of the HTTP request r answered by resp.
func noteAccess(r *http.Request, resp *agtp.Response) {
	x := extraLogFields(r)
	if x == nil {
		return
	}
	x.Set(zap.String("request_id", resp.RequestID))
	if resp.Reason != "" {
		x.Set(zap.String("reason", resp.Reason))
	}
}

// noteMCPAccess puts what the MCP door saw of r on its access log line:
// tools (the tools called), request_ids (one per engine answer: each
// call's, or the door's own refusal's) and reasons (the refusals'
// reason tokens, each once); each only when not empty.
func noteMCPAccess(r *http.Request, s mcpdoor.Summary) {
	x := extraLogFields(r)
	if x == nil {
		return
	}
	if len(s.Tools) > 0 {
		x.Set(zap.Strings("tools", s.Tools))
	}
	if len(s.RequestIDs) > 0 {
		x.Set(zap.Strings("request_ids", s.RequestIDs))
	}
	if len(s.Reasons) > 0 {
		x.Set(zap.Strings("reasons", s.Reasons))
	}
}
