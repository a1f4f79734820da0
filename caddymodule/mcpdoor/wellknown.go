package mcpdoor

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
)

// The well-known paths an MCP client's authorization discovery asks
// for once the MCP endpoint answers 401 (docs/doors.md "Well-known
// paths"): the protected-resource metadata (RFC 9728 §3.1), then the
// metadata of the authorization server (RFC 8414 §3.1, OpenID Connect
// Discovery 1.0 §4).
const (
	wellKnownResource      = "/.well-known/oauth-protected-resource"
	wellKnownAuthorization = "/.well-known/oauth-authorization-server"
	wellKnownOpenID        = "/.well-known/openid-configuration"
)

// wellKnownKind is what the door answers on one of its well-known paths.
type wellKnownKind int8

const (
	// resourceMetadata: the RFC 9728 document of the MCP endpoint.
	resourceMetadata wellKnownKind = iota + 1
	// noAuthorizationServer: 501 no-authorization-server.
	noAuthorizationServer
	// metadataElsewhere: under identity oauth, a protected-resource
	// metadata path that is not the configured resource's: 404 naming
	// the right one (RFC 9728 §3.3: a document's resource is the
	// identifier its URL was formed from).
	metadataElsewhere
)

// wellKnownPaths maps each well-known path the door owns for the MCP
// path mcpPath to what it answers there: the protected-resource
// metadata at the root form and at the form suffixed with the MCP path
// (RFC 9728 §3.1, the form the MCP TypeScript SDK asks first), and the
// authorization-server and OpenID configuration paths at the root, at
// the suffixed form and (OpenID Connect Discovery) appended to the MCP
// path. The MCP SDK, finding no authorization server in the resource
// metadata, looks for one at the origin's root (its legacy fallback),
// so the root forms are the ones clients actually ask for.
//
// Under identity oauth, the path of resourceMetadataURL (the metadata
// of the configured resource identifier) is one more resource-metadata
// path.
func wellKnownPaths(mcpPath, resourceMetadataURL string) map[string]wellKnownKind {
	p := strings.TrimSuffix(mcpPath, "/")
	out := map[string]wellKnownKind{
		wellKnownResource:          resourceMetadata,
		wellKnownResource + p:      resourceMetadata,
		wellKnownAuthorization:     noAuthorizationServer,
		wellKnownAuthorization + p: noAuthorizationServer,
		wellKnownOpenID:            noAuthorizationServer,
		wellKnownOpenID + p:        noAuthorizationServer,
		p + wellKnownOpenID:        noAuthorizationServer,
	}
	if u, err := url.Parse(resourceMetadataURL); err == nil && u.Path != "" {
		// Identity oauth: the gateway's one resource has its metadata
		// at one path; the other forms answer where it is.
		for path, kind := range out {
			if kind == resourceMetadata {
				out[path] = metadataElsewhere
			}
		}
		out[u.Path] = resourceMetadata
	}
	return out
}

// WellKnown reports whether the door answers a request for path itself
// (ServeWellKnown): one of the discovery paths of wellKnownPaths. Every
// other path is not the door's, whatever it starts with.
func (d *Door) WellKnown(path string) bool {
	return strings.Contains(path, "/.well-known/") && d.wellKnown[path] != 0
}

// ServeWellKnown answers a request for one of the door's well-known
// paths (WellKnown): GET or HEAD of the protected-resource metadata is
// 200 with the RFC 9728 document (resourceMetadataDocument), another
// method 405 method-not-allowed; any request for an authorization
// server's metadata is 501 no-authorization-server, explaining how an
// agent identifies itself instead. The answers allow any origin (CORS):
// they are public and carry no credential, and a browser-based MCP
// client that could not read them would take them for absent and guess
// on. A CORS preflight (OPTIONS with Access-Control-Request-Method) is
// 204.
func (d *Door) ServeWellKnown(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", "*")
	if preflight(w, r, "GET, HEAD", "Accept, MCP-Protocol-Version", "86400") {
		return
	}
	bodyRead := r.ContentLength == 0
	if d.wellKnown[r.URL.Path] == noAuthorizationServer {
		d.refuse(w, r, agtp.NoAuthorizationServer.WithFields(
			"this gateway runs no OAuth authorization server: there is no client registration, authorization or token endpoint to find, here or at any path of this host. "+d.identityHint()+d.issuerHint(),
			map[string]any{"identity_mode": d.e.Identity, "resource_metadata": d.resourceMetadataURL(r)}), nil, bodyRead)
		return
	}
	if d.wellKnown[r.URL.Path] == metadataElsewhere {
		d.refuse(w, r, agtp.NotFound.WithFields("this gateway's resource is "+d.e.OAuth.Resource+"; its protected-resource metadata is at "+d.resourceMetadataURL(r)+" (RFC 9728 §3.3), not at this path",
			map[string]any{"resource_metadata": d.resourceMetadataURL(r)}), nil, bodyRead)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		d.refuse(w, r, agtp.MethodNotAllowed.Newf("the protected-resource metadata %s answers GET and HEAD, not %s", r.URL.Path, r.Method), nil, bodyRead)
		return
	}
	var doc any = d.resourceMetadataDocument(r)
	if prm := d.e.ProtectedResourceMetadata(); prm != nil {
		doc = prm // identity oauth: the gateway's resource and its issuer
	}
	body, err := json.Marshal(doc)
	if err != nil {
		d.refuse(w, r, agtp.InternalError.New("the protected-resource metadata could not be encoded"), nil, bodyRead)
		return
	}
	hd.Set("Content-Type", "application/json")
	// The document names the endpoint by the request's Host.
	hd.Set("Vary", "Host")
	hd.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// resourceMetadataDocument is the RFC 9728 §2 document of the MCP
// endpoint for the request r:
//
//   - resource: the MCP endpoint's URL (resourceURL), which the MCP
//     SDK checks against the URL it connected to;
//   - bearer_methods_supported: [] ("no bearer methods are supported",
//     RFC 9728 §2): the gateway accepts no OAuth token;
//   - no authorization_servers: the gateway names none, having none;
//   - resource_name: the gateway's Server-ID;
//   - agtp_identity_mode and agtp_identity (additional parameters,
//     RFC 9728 §2): the identity mode and how to satisfy it.
func (d *Door) resourceMetadataDocument(r *http.Request) map[string]any {
	return map[string]any{
		"resource":                 d.resourceURL(r),
		"bearer_methods_supported": []string{},
		"resource_name":            d.e.ServerID + " (caddy-rcns AGTP gateway, MCP door)",
		"agtp_identity_mode":       d.e.Identity,
		"agtp_identity":            d.identityHint(),
	}
}

// resourceURL is the MCP endpoint's URL as the client reached it: the
// request's scheme (https over TLS), its Host and the MCP path.
func (d *Door) resourceURL(r *http.Request) string {
	return origin(r) + d.cfg.Path
}

// resourceMetadataURL is the URL of the protected-resource metadata the
// door serves, as every answer that names it names it: under identity
// oauth the engine's (engine.ResourceMetadataURL, formed from the
// configured resource identifier: the one metadata path the door
// answers 200 at, wellKnownPaths), otherwise the form suffixed with
// the MCP path (RFC 9728 §3.1) at the scheme and Host the request r was
// sent to.
func (d *Door) resourceMetadataURL(r *http.Request) string {
	if u := d.e.ResourceMetadataURL(); u != "" {
		return u
	}
	return origin(r) + wellKnownResource + strings.TrimSuffix(d.cfg.Path, "/")
}

// origin is the scheme and Host the request r was sent to.
func origin(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// identityHint says, in one or two sentences, how an agent identifies
// itself to the MCP endpoint in the engine's identity mode.
func (d *Door) identityHint() string {
	switch {
	case d.oauth:
		return "Identify your agent with an OAuth access token from the authorization server the protected-resource metadata names (Authorization: Bearer), issued to a client registered for your agent and for this gateway's resource; see docs/agent-guide-mcp.md."
	case d.e.Identity == engine.IdentitySignature:
		return "Identify your agent by signing every HTTP request to the MCP endpoint (RFC 9421, identity mode signature) with the key registered for its Agent-ID, covering @method, @path, @authority, agent-id, content-type and content-digest; see docs/agent-guide-mcp.md."
	case d.e.Identity == engine.IdentityMTLS:
		return "Identify your agent with its client certificate over TLS (identity mode mtls) and send its Agent-ID header on every HTTP request; see docs/agent-guide-mcp.md."
	default:
		return "Identify your agent by sending its registered Agent-ID header on every HTTP request (identity mode header, loopback connections only); see docs/agent-guide-mcp.md."
	}
}

// issuerHint names the authorization server of identity oauth (read its
// metadata there), "" when off.
func (d *Door) issuerHint() string {
	if prm := d.e.ProtectedResourceMetadata(); prm != nil {
		return " Its authorization server is " + prm.AuthorizationServers[0] + ": read that issuer's metadata, named by the protected-resource metadata at " + d.e.ResourceMetadataURL() + "."
	}
	return ""
}

// challenge is the WWW-Authenticate value of every 401 the door answers.
// RFC 9110 §11.6.1 requires a 401 to carry at least one challenge
// applicable to the target resource, and RFC 9728 §5.1 lets any scheme
// (not only Bearer) point at the protected-resource metadata with
// resource_metadata. The scheme is AGTP, never Bearer: no bearer token
// is accepted here, and a Bearer challenge would tell the client to go
// and get one. Its parameters name the realm (the Server-ID), the
// identity mode and the metadata's URL, so a client that understands no
// scheme of it still finds the metadata at the path RFC 9728 gives (the
// one the MCP SDK asks first), and a person reading the answer sees how
// to sign in.
func (d *Door) challenge(r *http.Request) string {
	return "AGTP realm=" + quoted(d.e.ServerID) + ", identity=" + quoted(d.e.Identity) + ", resource_metadata=" + quoted(d.resourceMetadataURL(r))
}

// quoted is s as an HTTP quoted-string (RFC 9110 §5.6.4): in double
// quotes, with '"' and '\' escaped.
func quoted(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return `"` + s + `"`
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}
