package engine

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
)

// The credential policies an upstream may name (CredentialsConfig.Policy).
const (
	// CredentialsStatic: the endpoints' and steps' own headers, plus the
	// policy's Header, the same for every caller (the default).
	CredentialsStatic = "static"
	// CredentialsPerAgent: a secret per (upstream, verified Agent-ID).
	CredentialsPerAgent = "per_agent"
	// CredentialsPerOwner: a secret per (upstream, verified owner).
	CredentialsPerOwner = "per_owner"
)

// CredentialsConfig is one upstream's credential policy (Caddyfile
// `credentials` inside an `upstream` block; docs/configuration.md
// "Upstream credentials"). The credential never comes from the agent's
// request, and a contract never stores one: it is resolved for the
// agent and owner that present the call, when it runs.
type CredentialsConfig struct {
	// Policy is "static" (default), "per_agent" or "per_owner".
	Policy string `json:"policy,omitempty"`
	// Header maps a header name to its value template, set on every
	// request to the upstream over the endpoint's and step's own
	// headers. static: the value as written, {env.NAME} read once at
	// load (an unset variable fails the load). per_agent / per_owner:
	// a template with {agent}, {owner}, {secret} (the id's secret from
	// Dir or File) and {env.NAME}, NAME may hold {agent} or {owner}
	// ({env.HOTEL_TOKEN_{agent}}), read when the call runs. Default with
	// Dir or File: Authorization "Bearer {secret}".
	Header map[string]string `json:"header,omitempty"`
	// Dir (per_agent / per_owner) is a directory holding one file per id,
	// named by the Agent-ID or owner id, whose content (trimmed) is
	// {secret}; read when the call runs, so a replaced file applies to
	// the next call. Exclusive with File.
	Dir string `json:"dir,omitempty"`
	// File (per_agent / per_owner) is a mapping file, YAML or JSON: id →
	// secret string ({secret}), or id → object of header → value (those
	// headers as written). Read at each config load (a reload applies a
	// changed file). Exclusive with Dir.
	File string `json:"file,omitempty"`
	// TokenExchange configures the token_exchange policy (RFC 8693).
	TokenExchange *TokenExchangeCredentials `json:"token_exchange,omitempty"`
	// Assertion configures the assertion policy (optional: every knob
	// has a default).
	Assertion *AssertionCredentials `json:"assertion,omitempty"`
}

// newCredentialPolicy builds upstream name's policy from cc (nil:
// static with no headers). Errors name the upstream and the knob.
func newCredentialPolicy(name string, cc *CredentialsConfig) (upstreamauth.Policy, error) {
	if cc == nil {
		return upstreamauth.Static{}, nil
	}
	switch cc.Policy {
	case "", CredentialsStatic:
		if cc.Dir != "" || cc.File != "" {
			return nil, fmt.Errorf("upstream %s: credentials static takes no dir or file (they are per_agent / per_owner sources)", name)
		}
		h, err := staticHeader(cc.Header)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: credentials static: %v", name, err)
		}
		return upstreamauth.Static{Header: h}, nil
	case CredentialsPerAgent, CredentialsPerOwner:
		return upstreamauth.NewPerCaller(upstreamauth.PerCallerConfig{Upstream: name, Kind: upstreamauth.Kind(cc.Policy),
			Header: cc.Header, Dir: cc.Dir, File: cc.File})
	// Token exchange (RFC 8693) and identity assertions add their cases
	// here.
	default:
		return nil, fmt.Errorf("upstream %s: credentials policy %q is not one of %s, %s, %s, %s, %s", name, cc.Policy,
			CredentialsStatic, CredentialsPerAgent, CredentialsPerOwner, CredentialsTokenExchange, CredentialsAssertion)
	}
}

// staticHeader is a static policy's headers: names checked, {env.NAME}
// in a value replaced by the variable (unset or empty fails), no other
// placeholder.
func staticHeader(in map[string]string) (http.Header, error) {
	if len(in) == 0 {
		return nil, nil
	}
	h := make(http.Header, len(in))
	for k, v := range in {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("%q is not a header name", k)
		}
		var b strings.Builder
		rest := v
		for {
			i := strings.Index(rest, "{env.")
			if i < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:i])
			j := strings.IndexByte(rest[i:], '}')
			if j < 0 {
				return nil, fmt.Errorf("header %s: an {env.…} is not closed", k)
			}
			name := rest[i+5 : i+j]
			val, ok := os.LookupEnv(name)
			if name == "" || !ok || val == "" {
				return nil, fmt.Errorf("header %s: environment variable %q is unset or empty", k, name)
			}
			b.WriteString(val)
			rest = rest[i+j+1:]
		}
		if !httpguts.ValidHeaderFieldValue(b.String()) || b.Len() == 0 {
			return nil, fmt.Errorf("header %s: the value is empty or not a header value", k)
		}
		h.Set(k, b.String())
	}
	return h, nil
}

// credentialStep is one upstream call a run will make: the step's name
// (the endpoint's "METHOD /path" for a Tier B call) and its endpoint.
type credentialStep struct {
	name string
	ep   *recipes.Endpoint
}

// endpointSteps is the one call of a Tier B endpoint.
func endpointSteps(ep *recipes.Endpoint) []credentialStep {
	return []credentialStep{{name: ep.Method + " " + ep.Path, ep: ep}}
}

// recipeSteps are the calls of a bound recipe's steps, in declared
// order.
func recipeSteps(r *recipes.Recipe) []credentialStep {
	out := make([]credentialStep, len(r.Steps))
	for i, s := range r.Steps {
		out[i] = credentialStep{name: s.Name, ep: s.Endpoint}
	}
	return out
}

// caller is whom x's upstream calls act for: the verified agent and
// owner of this request (never a contract's minting agent), its OAuth
// token and the request and contract ids.
func (x *exchange) upstreamCaller(req *request, contractID string) upstreamauth.Caller {
	c := upstreamauth.Caller{OwnerID: x.ownerID, ContractID: contractID, RequestID: x.requestID}
	if req.caller != nil && req.caller.Agent != nil {
		c.AgentID = req.caller.Agent.ID
	}
	if id := x.ident; id != nil {
		c.Token, c.Subject, c.Issuer = id.Token, id.Subject, id.Issuer
	}
	return c
}

// resolveCredentials resolves the credential policy of every upstream
// steps call, for the caller of x, before any of them runs. On a
// refusal it answers (RCNS §19 body naming the upstream and the step,
// never a secret; a 503 with Retry-After) and returns ok false: nothing
// ran. Scopes passed to a policy are the step endpoint's
// required_scopes. Each endpoint is resolved once; x records each
// step's kind (the Attribution-Record's upstream_credentials).
//
// plan says the steps are a plan's (a contract's or a synthesis's):
// its composition_timeout starts when the first policy that makes a
// call (a token exchange) resolves, and bounds the resolution too, so
// a slow authorization server cannot push a plan's upstream calls past
// it (docs/configuration.md composition_timeout); x.planDeadline keeps
// that deadline for execute when a resolution took a call. A Tier B
// call's credential is bounded by the policy's own timeout.
func (h *Engine) resolveCredentials(x *exchange, req *request, steps []credentialStep, contractID string, plan bool) (recipes.Credentials, bool) {
	caller := x.upstreamCaller(req, contractID)
	creds := make(recipes.Credentials, len(steps))
	var deadline time.Time // set by the first policy that makes a call: none for static ones
	for _, s := range steps {
		if _, done := creds[s.ep]; done {
			continue
		}
		up := s.ep.UpstreamName()
		p := h.credPolicies[up]
		if p == nil {
			p = upstreamauth.Static{}
		}
		var scopes []string // static needs none: no allocation on the common path
		if p.Kind() != upstreamauth.KindStatic {
			scopes = make([]string, len(s.ep.RequiredScopes))
			for i, sc := range s.ep.RequiredScopes {
				scopes[i] = sc.String()
			}
		}
		ctx := x.ctx()
		var cancel context.CancelFunc
		if p.Kind() != upstreamauth.KindStatic && plan && h.CompositionTimeout > 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(time.Duration(h.CompositionTimeout))
			}
			ctx, cancel = context.WithDeadline(ctx, deadline)
			x.planDeadline = deadline
		}
		c, ref := p.Resolve(ctx, caller, scopes)
		if cancel != nil {
			cancel()
		}
		if ref != nil {
			h.credentialRefused(x, ref, up, s.name)
			e, extra := credentialRefusal(ref, s.name)
			x.failWith(e, extra)
			return nil, false
		}
		creds[s.ep] = recipes.UpstreamCredential{Header: c.Header, Kind: string(c.Kind)}
	}
	x.credentials = stepKinds(steps, creds)
	return creds, true
}

// credentialRefused counts a refused credential and logs it. The
// gateway's own fault (ref.Cause set: a source that cannot be read, an
// authorization server that cannot be reached or that refuses the
// gateway's client) is a WARN with the cause, written within the
// budget of (upstream, reason) for all agents together, as the oauth
// issuer's WARN is: every caller meets the fault, and the number of
// agents must not set the log volume. Any other refusal is an INFO
// within x's per-agent budget. The line names the upstream, step and
// reason, never a secret.
func (h *Engine) credentialRefused(x *exchange, ref *upstreamauth.Refusal, up, step string) {
	h.metrics.credentialRefusal(up, ref.Reason)
	var l *zap.Logger
	if ref.Cause != "" {
		l = h.logBudget.logFor(x.log(), "upstream "+up, ref.Reason)
	} else {
		l = x.agentLog(ref.Reason)
	}
	if l == nil {
		return
	}
	fields := []zap.Field{zap.String("agent_id", x.agentID), zap.String("upstream", up),
		zap.String("step", step), zap.String("reason", ref.Reason)}
	if ref.Cause != "" {
		l.Warn("upstream credential unavailable", append(fields, zap.String("cause", ref.Cause))...)
		return
	}
	l.Info("upstream credential refused", fields...)
}

// credentialRefusal is the §19 error of a refused credential: the
// policy's status and reason, naming the upstream and step, and its
// extra headers (Retry-After for a 503 that says how long).
func credentialRefusal(ref *upstreamauth.Refusal, step string) (*agtp.Error, map[string]string) {
	status := ref.Status
	if status == 0 {
		// A policy that names no status: the catalog's for its reason,
		// else upstream-credential-missing's.
		status = agtp.UpstreamCredentialMissing.Status
		if cat := agtp.Lookup(ref.Reason); len(cat) > 0 {
			status = cat[0].Status
		}
	}
	fields := map[string]any{"upstream": ref.Upstream, "step": step}
	e := &agtp.Error{Status: status, Reason: ref.Reason,
		Explanation: ref.Explanation + "; nothing was run (step " + step + ")"}
	if cat := agtp.Lookup(ref.Reason); len(cat) > 0 {
		e.Retryable = cat[0].Retry == agtp.Retryable
	}
	var extra map[string]string
	if ref.RetryAfter > 0 {
		secs := int((ref.RetryAfter + time.Second - 1) / time.Second)
		fields["retry_after_seconds"] = secs
		e.Retryable = true
		extra = map[string]string{"Retry-After": strconv.Itoa(secs)}
	}
	e.Fields = fields
	return e, extra
}

// stepKinds is the records' upstream_credentials: each step's name,
// upstream and credential kind, in declared order.
func stepKinds(steps []credentialStep, creds recipes.Credentials) []stepCredential {
	out := make([]stepCredential, len(steps))
	for i, s := range steps {
		out[i] = stepCredential{Step: s.name, Upstream: s.ep.UpstreamName(), Kind: creds[s.ep].Kind}
	}
	return out
}

// stepCredential is one step's entry in an Attribution-Record's
// upstream_credentials: which kind of credential it used, never the
// value.
type stepCredential struct {
	Step, Upstream, Kind string
}

// buildCredentialPolicies builds every declared upstream's policy, in
// name order (the first error wins).
func buildCredentialPolicies(ups map[string]*UpstreamConfig, oauthResource string) (map[string]upstreamauth.Policy, error) {
	names := make([]string, 0, len(ups))
	for n := range ups {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(map[string]upstreamauth.Policy, len(names))
	for _, n := range names {
		p, err := newCredentialPolicyFor(n, ups[n], oauthResource)
		if err != nil {
			closeCredentialPolicies(out)
			return nil, err
		}
		out[n] = p
	}
	return out, nil
}
