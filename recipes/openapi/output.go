package openapi

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/caddy-rcns/caddy-rcns/policy"
)

// output builds output_schema from op's success responses and the
// error map from its declared 4xx responses (401 and 403 stay
// upstream_authentication_failed). The success responses are the 2xx
// codes (else 2XX, else default); when they declare different bodies,
// the output is anyOf them, a 204 (or an empty body) being null, so
// every answer the document promises passes.
func (im *importer) output(op *operation, n *notes, d *yamlDoc) (any, map[string]string, error) {
	errorMap := map[string]string{}
	var codes []string
	if op.kop.Responses != nil {
		for c := range op.kop.Responses.Map() {
			codes = append(codes, c)
		}
	}
	codes = sortedStatus(codes)
	var success []string
	for _, c := range codes {
		if len(c) == 3 && c[0] == '2' && c[1] >= '0' && c[1] <= '9' {
			success = append(success, c)
		}
		if code, err := strconv.Atoi(c); err == nil && code >= 400 && code <= 499 && code != 401 && code != 403 {
			errorMap[c] = snakeStatus(code)
		}
	}
	for _, c := range codes {
		if len(success) == 0 && strings.EqualFold(c, "2XX") {
			success = append(success, c)
		}
	}
	for _, c := range codes {
		if len(success) == 0 && c == "default" {
			success = append(success, c)
			n.add(op.ptr+"/responses/default", "no 2xx response is declared; the output schema is the default response's")
		}
	}
	if len(success) == 0 {
		d.comments["/output_schema"] = "review: the operation declares no success response; any answer is accepted"
		return newObject(), errorMap, nil
	}
	// One alternative per success response: a schema pointer, or null
	// (no body), or anything (a body without a schema).
	type alt struct{ code, ptr, kind string }
	var alts []alt
	var nonJSON []string
	for _, c := range success {
		rp := op.ptr + "/responses/" + escapeToken(c)
		respPtr, err := im.ix.follow(rp)
		if err != nil {
			return nil, nil, skipf(rp, "%v", err)
		}
		resp := op.kop.Responses.Value(c)
		switch {
		case resp == nil || resp.Value == nil || len(resp.Value.Content) == 0:
			if c == "204" {
				alts = append(alts, alt{code: c, kind: "null"})
			} else {
				alts = append(alts, alt{code: c, kind: "any"})
			}
		default:
			mt, ok := jsonMediaType(resp.Value.Content)
			if !ok {
				nonJSON = append(nonJSON, c+" "+mediaList(resp.Value.Content))
				continue
			}
			sp := respPtr + "/content/" + escapeToken(mt) + "/schema"
			if _, has := lookup(im.root, sp); !has {
				alts = append(alts, alt{code: c, kind: "any"})
				continue
			}
			alts = append(alts, alt{code: c, ptr: sp, kind: "schema"})
		}
	}
	if len(alts) == 0 {
		return nil, nil, skipf(op.ptr+"/responses", "the success response (%s) is not JSON; an endpoint reads JSON answers only", strings.Join(nonJSON, "; "))
	}
	if len(nonJSON) > 0 {
		n.add(op.ptr+"/responses", "success responses that are not JSON (%s) fail as upstream_malformed_response", strings.Join(nonJSON, "; "))
	}
	var used []string
	for _, a := range alts {
		used = append(used, a.code)
		if a.kind == "any" {
			d.comments["/output_schema"] = fmt.Sprintf("review: the %s response declares no schema; any answer is accepted", a.code)
			return newObject(), errorMap, nil
		}
	}
	t := newTranslator(im.ix, im.v30, fromUpstream, n)
	for _, a := range alts {
		if a.kind == "schema" {
			t.scan(a.ptr, nil)
		}
	}
	var out []any
	var seen []string
	for _, a := range alts {
		var s any
		if a.kind == "null" {
			o := newObject()
			o.set("type", "null")
			s = o
		} else {
			s = t.emit(a.ptr)
			if o, ok := s.(*object); ok && o.vals["type"] == "object" && !o.has("additionalProperties") && !o.has("$ref") {
				o.set("additionalProperties", true)
			}
		}
		var b bytes.Buffer
		writeJSON(&b, s)
		if slices.Contains(seen, b.String()) {
			continue
		}
		seen = append(seen, b.String())
		out = append(out, s)
	}
	if len(out) == 1 {
		if alts[0].kind == "null" {
			d.comments["/output_schema"] = "204 No Content: the answer is empty, null to the schema"
		}
		return t.withDefs(out[0]), errorMap, nil
	}
	union := newObject()
	union.set("anyOf", out)
	d.comments["/output_schema"] = "the success responses " + strings.Join(used, ", ") + ", any of them"
	return t.withDefs(union), errorMap, nil
}

// security applies op's security requirement (its own, else the
// document's): the first alternative whose every scheme a configured
// header can carry becomes headers reading secrets from environment
// variables, never a literal secret. It also decides the operation's
// header parameters: met by a credential, by Options.Headers or by a
// fixed value, or (optional ones) left out with a note; a required one
// met by none skips the operation.
func (im *importer) security(op *operation, params []*param, n *notes, d *yamlDoc) (map[string]string, []string, error) {
	headers := map[string]string{}
	for k, v := range im.opts.Headers {
		headers[k] = v
	}
	reqs := im.kdoc.Security
	reqPtr := "/security"
	if op.kop.Security != nil {
		reqs, reqPtr = *op.kop.Security, op.ptr+"/security"
	}
	var scopes []string
	if len(reqs) > 0 {
		var why []string
		chosen := -1
		var chosenHeaders map[string]string
		for i, req := range reqs {
			c, reason := im.credentialHeaders(req)
			if reason == "" {
				chosen, chosenHeaders = i, c.headers
				for _, e := range c.env {
					im.env[e] = true
				}
				for _, note := range c.notes {
					n.add(note[0], "%s", note[1])
				}
				break
			}
			why = append(why, reason)
		}
		if chosen < 0 {
			n.add(reqPtr, "no security requirement can be met by configured headers (%s); the endpoint calls the upstream without credentials", strings.Join(why, "; "))
		} else {
			for _, k := range sortedKeys(chosenHeaders) {
				if hasHeader(headers, k) {
					continue // Options.Headers wins
				}
				headers[k] = chosenHeaders[k]
				d.comments["/external_service/headers/"+escapeToken(k)] = "review: the secret comes from the environment variable; set it where the gateway runs"
			}
			if im.opts.ScopesFromSecurity {
				req := reqs[chosen]
				for _, name := range sortedKeys(req) {
					for _, s := range req[name] {
						if _, err := policy.ParseScope(s); err == nil {
							scopes = append(scopes, s)
						} else {
							n.add(reqPtr+"/"+strconv.Itoa(chosen)+"/"+escapeToken(name), "OAuth scope %q is not a scope token (a:b); not required", s)
						}
					}
				}
			}
		}
	}
	for _, p := range params {
		switch p.k.In {
		case openapi3.ParameterInHeader:
			name := p.k.Name
			if hasHeader(headers, name) {
				continue
			}
			if managedHeader(name) {
				continue // the gateway sets Accept and Content-Type itself
			}
			if v, ok := fixedValue(im.resolved(p.ptr + "/schema")); ok && headerName(name) {
				headers[name] = v
				d.comments["/external_service/headers/"+escapeToken(name)] = "the header parameter's only allowed value"
				continue
			}
			if p.k.Required {
				return nil, nil, skipf(p.ptr, "required header parameter %q: an endpoint sends only configured headers; give it a value with --header '%s: VALUE'", p.k.Name, p.k.Name)
			}
			n.add(p.ptr, "optional header parameter %q is not sent (an endpoint sends only configured headers; --header sets one)", p.k.Name)
		case openapi3.ParameterInCookie:
			if cookieSet(headers, p.k.Name) {
				continue
			}
			if p.k.Required {
				return nil, nil, skipf(p.ptr, "required cookie parameter %q: an endpoint sends only configured headers; give it with --header 'Cookie: %s=VALUE'", p.k.Name, p.k.Name)
			}
			n.add(p.ptr, "optional cookie parameter %q is not sent", p.k.Name)
		}
	}
	return headers, scopes, nil
}

// fixedValue returns the one value a header schema allows (const, or an
// enum of one string).
func fixedValue(s *object) (string, bool) {
	if s == nil {
		return "", false
	}
	if c, ok := s.vals["const"].(string); ok {
		return c, true
	}
	if e := s.arr("enum"); len(e) == 1 {
		v, ok := e[0].(string)
		return v, ok
	}
	return "", false
}

// credentials are the headers of one security requirement, the
// environment variables they read and the notes they need.
type credentials struct {
	headers map[string]string
	env     []string
	notes   [][2]string // pointer, note
}

// credentialHeaders returns the headers that carry the credentials of
// one security requirement, or why they cannot.
func (im *importer) credentialHeaders(req openapi3.SecurityRequirement) (*credentials, string) {
	c := &credentials{headers: map[string]string{}}
	h := c.headers
	var cookies []string
	names := make([]string, 0, len(req))
	for k := range req {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		var ss *openapi3.SecurityScheme
		if im.kdoc.Components != nil {
			if r := im.kdoc.Components.SecuritySchemes[name]; r != nil {
				ss = r.Value
			}
		}
		if ss == nil {
			return nil, fmt.Sprintf("scheme %s is not declared", name)
		}
		env := envName(im.opts.Upstream, name)
		ptr := "/components/securitySchemes/" + escapeToken(name)
		set := func(k, v string) bool {
			if hasHeader(h, k) {
				return false
			}
			h[k] = v
			return true
		}
		ok := true
		switch strings.ToLower(ss.Type) {
		case "apikey":
			switch ss.In {
			case "header":
				if !headerName(ss.Name) || managedHeader(ss.Name) {
					return nil, fmt.Sprintf("scheme %s: header %q cannot be configured", name, ss.Name)
				}
				ok = set(ss.Name, "${"+env+"}")
			case "cookie":
				cookies = append(cookies, ss.Name+"=${"+env+"}")
			default:
				return nil, fmt.Sprintf("scheme %s: an API key in the %s cannot be configured (only headers can)", name, ss.In)
			}
		case "http":
			switch strings.ToLower(ss.Scheme) {
			case "bearer":
				ok = set("Authorization", "Bearer ${"+env+"}")
			case "basic":
				ok = set("Authorization", "Basic ${"+env+"}")
				c.notes = append(c.notes, [2]string{ptr, fmt.Sprintf("HTTP Basic: %s must hold base64(user:password)", env)})
			default:
				return nil, fmt.Sprintf("scheme %s: HTTP %s authentication cannot be configured", name, ss.Scheme)
			}
		case "oauth2", "openidconnect":
			ok = set("Authorization", "Bearer ${"+env+"}")
			c.notes = append(c.notes, [2]string{ptr, fmt.Sprintf("%s: the gateway sends the fixed access token in %s; it runs no OAuth flow and does not refresh the token", ss.Type, env)})
		default:
			return nil, fmt.Sprintf("scheme %s (%s) cannot be carried by a header", name, ss.Type)
		}
		if !ok {
			return nil, "schemes of one requirement both need the header Authorization"
		}
		c.env = append(c.env, env)
	}
	if len(cookies) > 0 {
		h["Cookie"] = strings.Join(cookies, "; ")
	}
	return c, ""
}

// cookieSet reports whether the Cookie header in headers sets the
// cookie name.
func cookieSet(headers map[string]string, name string) bool {
	for k, v := range headers {
		if !strings.EqualFold(k, "Cookie") {
			continue
		}
		for _, c := range strings.Split(v, ";") {
			if n, _, ok := strings.Cut(strings.TrimSpace(c), "="); ok && n == name {
				return true
			}
		}
	}
	return false
}

// hasHeader reports whether headers has a field named k, compared
// without case (RFC 9110 §5.1).
func hasHeader(headers map[string]string, k string) bool {
	for name := range headers {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}

var camelBoundary = regexp.MustCompile(`([a-z0-9])([A-Z])`)
var nonEnvChars = regexp.MustCompile(`[^A-Z0-9]+`)

// envName is the environment variable holding the secret of security
// scheme on upstream: both names in upper snake case, joined by '_'
// (petstore and api_key → PETSTORE_API_KEY; discord and BotToken →
// DISCORD_BOT_TOKEN).
func envName(upstream, scheme string) string {
	f := func(s string) string {
		s = camelBoundary.ReplaceAllString(s, "${1}_${2}")
		return strings.Trim(nonEnvChars.ReplaceAllString(strings.ToUpper(s), "_"), "_")
	}
	name := f(upstream) + "_" + f(scheme)
	name = strings.Trim(name, "_")
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		name = "_" + name
	}
	return name
}
