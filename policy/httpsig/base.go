package httpsig

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
)

// message is the part of an HTTP message the signature base reads: a
// request, or (for RFC 9421 Appendix B response vectors) a response
// status and its header fields.
type message struct {
	req    *http.Request // nil for a response
	status int           // response status code
	header http.Header
}

// SignatureBase builds the RFC 9421 §2.5 signature base of req for the
// covered components (identifiers as they appear in Signature-Input,
// without quotes: "@method", "content-type") and params, the serialized
// signature parameters (§2.3), e.g.
// `("@method" "@path");created=1618884473;keyid="k"`.
//
// The result is one line per component, `"<identifier>": <value>`, in
// the order given, then the `"@signature-params": <params>` line, joined
// by "\n" with no trailing newline. The @signature-params value is the
// canonical Structured Field serialization (RFC 8941 §4.1) of params,
// which equals params whenever params is already canonical.
//
// It fails when params is not an Inner List whose items are exactly
// components, when a component is duplicated, unknown or carries
// parameters, or when a covered header field is absent from req.
// Exported for tests and tools; [Signer.Sign] and [Verify] use it.
func SignatureBase(req *http.Request, components []string, params string) (string, error) {
	if req == nil {
		return "", errors.New("httpsig: nil request")
	}
	il, err := parseSignatureParams(params)
	if err != nil {
		return "", err
	}
	if len(il.Items) != len(components) {
		return "", fmt.Errorf("httpsig: params cover %d components, %d given", len(il.Items), len(components))
	}
	for i, it := range il.Items {
		s, ok := it.Value.(string)
		if !ok || s != components[i] {
			return "", fmt.Errorf("httpsig: params component %d differs from %q", i, components[i])
		}
	}
	return signatureBase(message{req: req, header: req.Header}, il)
}

// responseSignatureBase is SignatureBase for a response (RFC 9421 §2.2.9
// "@status" and header fields only); it exists for the Appendix B.2.4
// vector.
func responseSignatureBase(resp *http.Response, params string) (string, error) {
	il, err := parseSignatureParams(params)
	if err != nil {
		return "", err
	}
	return signatureBase(message{status: resp.StatusCode, header: resp.Header}, il)
}

// parseSignatureParams parses a serialized signature parameters value
// (an Inner List with parameters, RFC 9421 §2.3).
func parseSignatureParams(params string) (httpsfv.InnerList, error) {
	d, err := httpsfv.UnmarshalDictionary([]string{"p=" + params})
	if err != nil {
		return httpsfv.InnerList{}, fmt.Errorf("httpsig: signature params: %w", err)
	}
	m, _ := d.Get("p")
	il, ok := m.(httpsfv.InnerList)
	if !ok || len(d.Names()) != 1 {
		return httpsfv.InnerList{}, errors.New("httpsig: signature params are not one inner list")
	}
	return il, nil
}

// signatureBase implements RFC 9421 §2.5 over il, the covered
// components with the signature parameters.
func signatureBase(m message, il httpsfv.InnerList) (string, error) {
	var b strings.Builder
	seen := make(map[string]bool, len(il.Items))
	for _, it := range il.Items {
		name, err := componentName(it)
		if err != nil {
			return "", err
		}
		if seen[name] {
			return "", fmt.Errorf("httpsig: component %q covered twice", name)
		}
		seen[name] = true
		if name == "@signature-params" {
			return "", errors.New(`httpsig: "@signature-params" cannot be covered`)
		}
		v, err := componentValue(m, name)
		if err != nil {
			return "", err
		}
		if err := checkValue(name, v); err != nil {
			return "", err
		}
		// name is a lowercase tchar field name or a known @-name: its
		// sf-string serialization is the name in double quotes.
		b.WriteString(`"` + name + `"`)
		b.WriteString(": ")
		b.WriteString(v)
		b.WriteByte('\n')
	}
	sp, err := httpsfv.Marshal(il)
	if err != nil {
		return "", fmt.Errorf("httpsig: signature params: %w", err)
	}
	b.WriteString(`"@signature-params": `)
	b.WriteString(sp)
	return b.String(), nil
}

// componentName returns the identifier of a covered-component item: a
// String without parameters (RFC 9421 §2; parameters are unsupported
// here).
func componentName(it httpsfv.Item) (string, error) {
	s, ok := it.Value.(string)
	if !ok {
		return "", errors.New("httpsig: component identifier is not a string")
	}
	if it.Params != nil && len(it.Params.Names()) > 0 {
		return "", fmt.Errorf("httpsig: component %q: parameters are not supported", s)
	}
	if s == "" {
		return "", errors.New("httpsig: empty component identifier")
	}
	if s[0] == '@' {
		return s, nil
	}
	for i := 0; i < len(s); i++ {
		if !isLowerTchar(s[i]) {
			return "", fmt.Errorf("httpsig: component %q is not a lowercase field name", s)
		}
	}
	return s, nil
}

// isLowerTchar reports whether c is an RFC 9110 tchar other than an
// uppercase letter.
func isLowerTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// checkValue refuses component values that would break the line
// structure of the base (RFC 9421 §2.5: CR, LF and other controls).
func checkValue(name, v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Errorf("httpsig: component %q value has a control character", name)
		}
	}
	return nil
}

// componentValue derives the value of one component (RFC 9421 §2.1,
// §2.2).
func componentValue(m message, name string) (string, error) {
	if name[0] != '@' {
		return fieldValue(m, name)
	}
	if m.req == nil {
		if name == "@status" {
			return strconv.Itoa(m.status), nil
		}
		return "", fmt.Errorf("httpsig: component %q is not defined for a response", name)
	}
	r := m.req
	if r.URL == nil {
		return "", errors.New("httpsig: request has no URL")
	}
	switch name {
	case "@method": // §2.2.1: as sent, no case normalization
		return r.Method, nil
	case "@target-uri": // §2.2.2
		return scheme(r) + "://" + authority(r) + requestPath(r) + queryPart(r), nil
	case "@authority": // §2.2.3
		return authority(r), nil
	case "@scheme": // §2.2.4
		return scheme(r), nil
	case "@request-target": // §2.2.5
		if r.RequestURI != "" {
			return r.RequestURI, nil
		}
		return requestPath(r) + queryPart(r), nil
	case "@path": // §2.2.6
		return requestPath(r), nil
	case "@query": // §2.2.7: "?" alone when the query is absent or empty
		return "?" + r.URL.RawQuery, nil
	case "@status":
		return "", errors.New(`httpsig: "@status" is not defined for a request`)
	}
	return "", fmt.Errorf("httpsig: unsupported derived component %q", name)
}

// fieldValue is the RFC 9421 §2.1 value of header field name: every
// field line's value with leading and trailing whitespace removed,
// joined by ", ". An absent field is an error; a present empty field is
// the empty string.
func fieldValue(m message, name string) (string, error) {
	vals, ok := m.header[http.CanonicalHeaderKey(name)]
	if !ok && name == "host" && m.req != nil && m.req.Host != "" {
		vals, ok = []string{m.req.Host}, true // net/http moves Host out of Header
	}
	if !ok {
		return "", fmt.Errorf("httpsig: covered header field %q is absent", name)
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = strings.Trim(v, " \t")
	}
	return strings.Join(parts, ", "), nil
}

// scheme is the lowercase URI scheme of r: the URL's when absolute
// (client side), else "https" over TLS and "http" otherwise (server
// side).
func scheme(r *http.Request) string {
	if r.URL != nil && r.URL.Scheme != "" {
		return strings.ToLower(r.URL.Scheme)
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// authority is the RFC 9421 §2.2.3 value: the Host (or URL host when
// Host is empty), lowercased, without the scheme's default port.
func authority(r *http.Request) string {
	h := r.Host
	if h == "" && r.URL != nil {
		h = r.URL.Host
	}
	return normalizeAuthority(h, scheme(r))
}

// normalizeAuthority lowercases the host[:port] h and removes the
// default port of scheme (":443" for https, ":80" for http, ":4480" for
// agtp and agtps, the AGTP port of agtp-09 §6.1) and an empty port.
func normalizeAuthority(h, scheme string) string {
	h = strings.ToLower(h)
	switch {
	case scheme == "https" && strings.HasSuffix(h, ":443"):
		h = strings.TrimSuffix(h, ":443")
	case scheme == "http" && strings.HasSuffix(h, ":80"):
		h = strings.TrimSuffix(h, ":80")
	case (scheme == "agtp" || scheme == "agtps") && strings.HasSuffix(h, ":4480"):
		h = strings.TrimSuffix(h, ":4480")
	}
	return strings.TrimSuffix(h, ":") // empty port
}

// requestPath is the escaped absolute path of r, "/" when empty (RFC
// 9421 §2.2.6).
func requestPath(r *http.Request) string {
	if r.URL == nil {
		return "/"
	}
	p := r.URL.EscapedPath()
	if p == "" {
		return "/"
	}
	return p
}

// queryPart is "?query" when r's URL has a query (even empty), else "".
func queryPart(r *http.Request) string {
	if r.URL != nil && (r.URL.RawQuery != "" || r.URL.ForceQuery) {
		return "?" + r.URL.RawQuery
	}
	return ""
}
