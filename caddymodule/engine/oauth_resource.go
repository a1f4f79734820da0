package engine

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// ResourceMetadataURL is the URL of this gateway's RFC 9728
// protected-resource metadata under identity oauth: the well-known path
// inserted before the resource identifier's path (RFC 9728 §3.1). ""
// when identity oauth is off.
func (h *Engine) ResourceMetadataURL() string {
	if h.oauth == nil {
		return ""
	}
	return h.oauth.metadataURL
}

// metadataURL is the RFC 9728 §3.1 metadata URL of resource ("" when
// it does not parse; validate refused that).
func metadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
}

// ProtectedResourceMetadata is the RFC 9728 §2 document of this gateway
// under identity oauth (nil when off): the resource identifier, the one
// authorization server, the scopes the scope map names, bearer tokens
// in the Authorization header only.
func (h *Engine) ProtectedResourceMetadata() *oauthex.ProtectedResourceMetadata {
	if h.oauth == nil {
		return nil
	}
	return &oauthex.ProtectedResourceMetadata{
		Resource:               h.OAuth.Resource,
		AuthorizationServers:   []string{h.OAuth.Issuer},
		ScopesSupported:        h.OAuth.ScopesSupported(),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           h.ServerID + " (caddy-rcns AGTP gateway)",
	}
}

// BearerChallenge is the WWW-Authenticate value (RFC 6750 §3, RFC 9728
// §5.1) of the refusal e under identity oauth, "" when oauth is off or
// e needs none: every 401 gets a Bearer challenge naming the metadata
// and the supported scopes (error="invalid_token" when a token was
// refused); 400 invalid-authorization (a malformed Authorization
// header) gets error="invalid_request" (RFC 6750 §3.1); 403
// insufficient-scope gets error="insufficient_scope" and scope naming
// every OAuth scope the operation needs.
func (h *Engine) BearerChallenge(e *agtp.Error) string {
	if h.oauth == nil || e == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("Bearer realm=" + quote(h.ServerID))
	param := func(k, v string) { b.WriteString(", " + k + "=" + quote(v)) }
	switch {
	case e.Reason == agtp.InvalidAuthorization.Token:
		param("error", "invalid_request")
		param("error_description", textcut.Clip(e.Reason))
	case e.Reason == agtp.InsufficientScope.Token:
		param("error", "insufficient_scope")
		var need []string
		if l, ok := e.Fields["required_scopes"].([]string); ok {
			need = h.OAuth.oauthScopesFor(l)
		}
		if len(need) > 0 {
			param("scope", strings.Join(need, " "))
		}
	case e.Status == http.StatusUnauthorized:
		switch e.Reason {
		case agtp.TokenInvalid.Token, agtp.TokenExpired.Token, agtp.TokenAudience.Token, agtp.TokenInactive.Token,
			agtp.OAuthClientUnknown.Token, agtp.IdentityConflict.Token:
			param("error", "invalid_token")
			param("error_description", textcut.Clip(e.Reason))
		}
		if s := h.OAuth.ScopesSupported(); len(s) > 0 {
			param("scope", strings.Join(s, " "))
		}
	default:
		return ""
	}
	param("resource_metadata", h.ResourceMetadataURL())
	return b.String()
}

// quote is s as an HTTP quoted-string (RFC 9110 §5.6.4).
func quote(s string) string {
	if !strings.ContainsAny(s, "\"\\") {
		return "\"" + s + "\""
	}
	return "\"" + strings.NewReplacer("\\", "\\\\", "\"", "\\\"").Replace(s) + "\""
}
