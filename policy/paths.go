package policy

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// isPchar reports whether c may appear literally in a path segment:
// unreserved / sub-delims / ":" / "@" (pct-encoded is handled apart).
// RCNS §6 ABNF (RFC 3986 pchar).
func isPchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', // unreserved
		'!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', // sub-delims
		':', '@':
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// segmentSyntax checks one raw segment against segment-char; it returns ""
// or a description of the first offending character.
func segmentSyntax(seg string) string {
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			if i+2 >= len(seg) || !isHex(seg[i+1]) || !isHex(seg[i+2]) {
				return "an invalid percent-encoding"
			}
			i += 2
			continue
		}
		if !isPchar(c) {
			return "the " + DescribeChar(seg, i)
		}
	}
	return ""
}

// decodeSegment percent-decodes one raw segment; ok is false on an
// invalid escape. Other bytes are kept as they are.
func decodeSegment(seg string) (string, bool) {
	if !strings.Contains(seg, "%") {
		return seg, true
	}
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			if i+2 >= len(seg) || !isHex(seg[i+1]) || !isHex(seg[i+2]) {
				return "", false
			}
			b.WriteByte(unhex(seg[i+1])<<4 | unhex(seg[i+2]))
			i += 2
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// isDotSegment reports whether a decoded segment is "." or "..".
func isDotSegment(dec string) bool { return dec == "." || dec == ".." }

// asciiFold maps r to its ASCII uppercase letter under Unicode simple case
// folding (so 'q', 'Q' → 'Q'; U+017F 'ſ' → 'S'; U+212A Kelvin → 'K');
// ok is false when r folds to no ASCII letter.
func asciiFold(r rune) (byte, bool) {
	switch {
	case 'A' <= r && r <= 'Z':
		return byte(r), true
	case 'a' <= r && r <= 'z':
		return byte(r - 'a' + 'A'), true
	case r < 0x80:
		return 0, false
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if 'A' <= f && f <= 'Z' || 'a' <= f && f <= 'z' {
			return asciiFold(f)
		}
	}
	return 0, false
}

// normalizeSegment writes the method-name form of a decoded segment
// ('-' and '_' removed, letters case-folded to ASCII uppercase) into buf
// and returns it, or nil when the result cannot be a method name. It
// allocates nothing: reservedMethod looks the form up without copying it.
func normalizeSegment(dec string, buf *[33]byte) []byte {
	n := 0
	for _, r := range dec {
		if r == '-' || r == '_' {
			continue
		}
		c, ok := asciiFold(r)
		if !ok || n == len(buf) {
			return nil
		}
		buf[n] = c
		n++
	}
	if n < 3 || n > 32 { // ValidMethodToken's length; every byte is A-Z
		return nil
	}
	return buf[:n]
}

// reservedMethod returns the method name seg collides with, or "".
func (p *MethodPolicy) reservedMethod(seg string) string {
	dec, ok := decodeSegment(seg)
	if !ok {
		return ""
	}
	var buf [33]byte
	form := normalizeSegment(dec, &buf)
	if form == nil {
		return ""
	}
	// name does not escape (the lookups only read it), so it stays on
	// the stack; only a collision, the rare refusal, copies it.
	name := string(form)
	if p.IsMethod(name) || IsLegacyVerb(name) {
		return strings.Clone(name)
	}
	if _, ok := p.aliases()[name]; ok {
		return strings.Clone(name)
	}
	return ""
}

// IsReservedSegment reports whether a raw path segment equals a method
// name known to p — catalog ∪ custom ∪ legacy verbs ∪ alias sources —
// compared case-insensitively after percent-decoding and after removing
// '-' and '_' (so "query", "Query", "q-uery", "q_uery", "%51uery" are
// all reserved). RCNS §6, OP-13.
func (p *MethodPolicy) IsReservedSegment(seg string) bool {
	return p.reservedMethod(seg) != ""
}

// pathRefusal builds the 460 refusal of RCNS §6.
func pathRefusal(path, seg, expl string) *Refusal {
	return &Refusal{
		Status:      StatusEndpointViolation,
		Reason:      "path-grammar-violation",
		Explanation: expl,
		Fields:      map[string]any{"segment": seg, "path": path},
	}
}

// CheckPathCharacters checks only the characters of a request path as
// the client sent it (the request target before "?"): each must be a
// pchar (RFC 3986: unreserved / sub-delims / ":" / "@"), "/" or a valid
// percent-encoding (RCNS §6). It exists because Go's url.URL escapes a
// raw character outside that set ("{", "|", "^", a space…) into a valid
// percent-encoding, so CheckPath on the parsed form cannot see one. The
// refusal (460 path-grammar-violation) names the segment.
func CheckPathCharacters(raw string) *Refusal {
	for rest, more := raw, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		if bad := segmentSyntax(seg); bad != "" {
			return pathRefusal(raw, seg, fmt.Sprintf("Path segment %s contains %s, which the AGTP path grammar does not allow (send it percent-encoded).", quote(seg), bad))
		}
	}
	return nil
}

// CheckPath validates a concrete request path in escaped form, without
// the query (RCNS §6): it must start with "/", must not end with "/"
// unless it is exactly "/", must have no empty segment ("//"), every
// segment must consist of unreserved / pct-encoded / sub-delims / ":" /
// "@", no segment may be "." or ".." (also percent-encoded), and no
// segment may be reserved (IsReservedSegment). It returns nil for a valid
// path, else a 460 Refusal with Reason "path-grammar-violation" and
// Fields {"segment": offending raw segment, "path": path}.
func (p *MethodPolicy) CheckPath(path string) *Refusal {
	if !strings.HasPrefix(path, "/") {
		seg, _, _ := strings.Cut(path, "/")
		return pathRefusal(path, seg, fmt.Sprintf("Path %s must start with \"/\".", quote(path)))
	}
	if path == "/" {
		return nil
	}
	if strings.HasSuffix(path, "/") {
		return pathRefusal(path, "", fmt.Sprintf("Path %s must not end with \"/\" (only the root path \"/\" may).", quote(path)))
	}
	for rest := path[1:]; ; {
		seg, tail, more := strings.Cut(rest, "/")
		if ref := p.checkLiteralSegment(path, seg, true); ref != nil {
			return ref
		}
		if !more {
			return nil
		}
		rest = tail
	}
}

// checkLiteralSegment checks one raw literal segment of path.
func (p *MethodPolicy) checkLiteralSegment(path, seg string, reserved bool) *Refusal {
	if seg == "" {
		return pathRefusal(path, seg, fmt.Sprintf("Path %s contains an empty segment (\"//\").", quote(path)))
	}
	if bad := segmentSyntax(seg); bad != "" {
		return pathRefusal(path, seg, fmt.Sprintf("Path segment %s contains %s, which the AGTP path grammar does not allow.", quote(seg), bad))
	}
	if dec, _ := decodeSegment(seg); isDotSegment(dec) {
		return pathRefusal(path, seg, fmt.Sprintf("Path segment %s is a dot segment, which is not allowed.", quote(seg)))
	}
	if reserved {
		if m := p.reservedMethod(seg); m != "" {
			return pathRefusal(path, seg, fmt.Sprintf("Path segment %s equals the AGTP method name %s (compared case-insensitively, ignoring '-' and '_'); method names cannot be path segments (%s); rename it, e.g. to a plural noun.", quote(seg), m, PathRule))
		}
	}
	return nil
}

// templateMode selects which rules parseTemplate applies.
type templateMode int

const (
	// templateAGTP: AGTP-facing path; reserved segments refused, no
	// trailing slash.
	templateAGTP templateMode = iota
	// templateRaw: template syntax only (upstream paths); a trailing
	// slash is kept.
	templateRaw
)

// tmplSeg is one template segment: a literal (raw as written and its
// decoded form) or a parameter.
type tmplSeg struct {
	lit   string // raw literal, "" for a parameter
	dec   string // decoded literal
	param string // parameter name, "" for a literal
}

// PathTemplate is a parsed path template: literal segments and
// whole-segment {name} parameters (RCNS §6). It is immutable and safe for
// concurrent use.
type PathTemplate struct {
	raw      string
	segs     []tmplSeg
	params   []string
	trailing bool
}

// ParsePathTemplate parses a registration-time AGTP path template:
// whole-segment {name} parameters only (name = 1*(ALPHA / DIGIT / "_")),
// unique names, literal segments checked like CheckPath (grammar, dot
// segments, reserved method names). The error names the offending
// segment. RCNS §6.
func (p *MethodPolicy) ParsePathTemplate(tmpl string) (*PathTemplate, error) {
	return parseTemplate(tmpl, templateAGTP, p)
}

// ParseRawTemplate parses a path template checking only template syntax:
// it must start with "/", have no empty segment, literal segments must be
// RFC 3986 pchar sequences other than "." and "..", and parameters are
// whole-segment {name}, unique. Reserved method names are allowed and a
// trailing "/" is kept (upstream REST paths, ARCHITECTURE.md). Use it for
// upstream path templates.
func ParseRawTemplate(tmpl string) (*PathTemplate, error) {
	return parseTemplate(tmpl, templateRaw, nil)
}

func parseTemplate(tmpl string, mode templateMode, p *MethodPolicy) (*PathTemplate, error) {
	if !strings.HasPrefix(tmpl, "/") {
		return nil, fmt.Errorf("path template %q must start with \"/\"", tmpl)
	}
	t := &PathTemplate{raw: tmpl}
	if tmpl == "/" {
		return t, nil
	}
	body := tmpl[1:]
	if strings.HasSuffix(body, "/") {
		if mode == templateAGTP {
			return nil, fmt.Errorf("path template %q must not end with \"/\"", tmpl)
		}
		t.trailing = true
		body = body[:len(body)-1]
	}
	seen := map[string]bool{}
	for _, seg := range strings.Split(body, "/") {
		if strings.ContainsAny(seg, "{}") {
			name, ok := paramName(seg)
			if !ok {
				return nil, fmt.Errorf("path template %q: segment %q: parameters must be a whole segment {name} with name of letters, digits and '_'", tmpl, seg)
			}
			if seen[name] {
				return nil, fmt.Errorf("path template %q: parameter {%s} appears twice", tmpl, name)
			}
			seen[name] = true
			t.segs = append(t.segs, tmplSeg{param: name})
			t.params = append(t.params, name)
			continue
		}
		if ref := p.checkLiteralSegment(tmpl, seg, mode == templateAGTP); ref != nil {
			return nil, fmt.Errorf("path template %q: segment %q: %s", tmpl, seg, ref.Explanation)
		}
		dec, _ := decodeSegment(seg)
		t.segs = append(t.segs, tmplSeg{lit: seg, dec: dec})
	}
	return t, nil
}

// paramName returns the name of a "{name}" segment.
func paramName(seg string) (string, bool) {
	if len(seg) < 3 || seg[0] != '{' || seg[len(seg)-1] != '}' {
		return "", false
	}
	name := seg[1 : len(seg)-1]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return "", false
		}
	}
	return name, true
}

// String returns the template as written.
func (t *PathTemplate) String() string { return t.raw }

// Params returns the parameter names in template order (empty, never nil).
func (t *PathTemplate) Params() []string { return append([]string{}, t.params...) }

// splitPath splits an escaped path into raw segments; ok is false when
// path does not start with "/" or its trailing-slash form differs from
// trailing.
func splitPath(path string, trailing bool) ([]string, bool) {
	if !strings.HasPrefix(path, "/") {
		return nil, false
	}
	if path == "/" {
		return nil, !trailing
	}
	body := path[1:]
	if trailing {
		if !strings.HasSuffix(body, "/") {
			return nil, false
		}
		body = body[:len(body)-1]
	}
	return strings.Split(body, "/"), true
}

// Match matches an escaped request path (no query) against the template.
// Literal segments compare after percent-decoding; each parameter matches
// exactly one non-empty segment and its value is percent-decoded. It
// returns the parameter values (empty, non-nil map for a template without
// parameters) and true, or nil and false.
func (t *PathTemplate) Match(path string) (map[string]string, bool) {
	segs, ok := splitPath(path, t.trailing)
	if !ok || len(segs) != len(t.segs) {
		return nil, false
	}
	values := make(map[string]string, len(t.params))
	for i, s := range t.segs {
		dec, ok := decodeSegment(segs[i])
		if !ok {
			return nil, false
		}
		if s.param == "" {
			if dec != s.dec || segs[i] == "" {
				return nil, false
			}
			continue
		}
		if segs[i] == "" {
			return nil, false
		}
		values[s.param] = dec
	}
	return values, true
}

// Expand builds a path from the template: literal segments as written,
// each parameter value escaped as exactly one segment with url.PathEscape
// (so "/", "?", "#", "%", CR and LF never change the path structure).
// Extra keys in values are ignored. It returns an error naming the
// parameter when a value is missing, empty, "." or "..".
func (t *PathTemplate) Expand(values map[string]string) (string, error) {
	return t.expand(func(_ int, name string) (string, bool) {
		v, ok := values[name]
		return v, ok
	})
}

// ExpandParams is Expand with the values given in Params order
// (values[i] for Params()[i]), without building a map; fewer values
// than parameters is the missing-value error.
func (t *PathTemplate) ExpandParams(values []string) (string, error) {
	return t.expand(func(i int, _ string) (string, bool) {
		if i >= len(values) {
			return "", false
		}
		return values[i], true
	})
}

// expand builds the path, asking value for the i-th parameter (named
// name) of the template.
func (t *PathTemplate) expand(value func(i int, name string) (string, bool)) (string, error) {
	if len(t.segs) == 0 {
		return "/", nil
	}
	var b strings.Builder
	i := 0
	for _, s := range t.segs {
		b.WriteByte('/')
		if s.param == "" {
			b.WriteString(s.lit)
			continue
		}
		v, ok := value(i, s.param)
		i++
		switch {
		case !ok:
			return "", fmt.Errorf("path template %q: no value for parameter {%s}", t.raw, s.param)
		case v == "":
			return "", fmt.Errorf("path template %q: empty value for parameter {%s}", t.raw, s.param)
		case isDotSegment(v):
			return "", fmt.Errorf("path template %q: value %q for parameter {%s} is a dot segment", t.raw, v, s.param)
		}
		b.WriteString(url.PathEscape(v))
	}
	if t.trailing {
		b.WriteByte('/')
	}
	return b.String(), nil
}

// overlaps reports whether some path can match both templates.
func (t *PathTemplate) overlaps(u *PathTemplate) bool {
	if len(t.segs) != len(u.segs) || t.trailing != u.trailing {
		return false
	}
	for i := range t.segs {
		a, b := t.segs[i], u.segs[i]
		if a.param == "" && b.param == "" && a.dec != b.dec {
			return false
		}
	}
	return true
}

// sameShape reports whether the templates are the same up to parameter
// names.
func (t *PathTemplate) sameShape(u *PathTemplate) bool {
	if len(t.segs) != len(u.segs) || t.trailing != u.trailing {
		return false
	}
	for i := range t.segs {
		a, b := t.segs[i], u.segs[i]
		if (a.param == "") != (b.param == "") || a.dec != b.dec {
			return false
		}
	}
	return true
}

// route is one RouteTable entry.
type route[T any] struct {
	method string
	tmpl   *PathTemplate
	value  T
	seq    int
}

// RouteTable maps (method, path template) to values. Lookup follows RCNS
// §6 "Matching": an exact literal template first, then templates with the
// same segment count, fewest parameters winning. The zero value is an
// empty table. Add must not run concurrently with other methods; once
// built, Lookup, MethodsForPath and All are safe for concurrent use.
type RouteTable[T any] struct {
	byMethod map[string][]*route[T]
	n        int
}

// Add registers v for (method, t). It returns an error when t is nil,
// method fails the lexical rule, the (method, template) pair is already
// registered (parameter names do not matter), or another template of the
// same method with the same parameter count can match the same path (RCNS
// §6 registration-time rule).
func (rt *RouteTable[T]) Add(method string, t *PathTemplate, v T) error {
	if t == nil {
		return errors.New("route: nil path template")
	}
	if !ValidMethodToken(method) {
		return fmt.Errorf("route %s %s: method does not match ^[A-Z]+$ with length 3..32", quote(method), t.raw)
	}
	for _, r := range rt.byMethod[method] {
		if r.tmpl.sameShape(t) {
			return fmt.Errorf("route %s %s: already registered as %s %s", method, t.raw, method, r.tmpl.raw)
		}
		if len(r.tmpl.params) == len(t.params) && r.tmpl.overlaps(t) {
			return fmt.Errorf("route %s %s: ambiguous with %s %s (same parameter count, both can match one path)", method, t.raw, method, r.tmpl.raw)
		}
	}
	if rt.byMethod == nil {
		rt.byMethod = map[string][]*route[T]{}
	}
	rs := append(rt.byMethod[method], &route[T]{method: method, tmpl: t, value: v, seq: rt.n})
	rt.n++
	// Keep fewest parameters first, then registration order.
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].tmpl.params) < len(rs[j].tmpl.params) })
	rt.byMethod[method] = rs
	return nil
}

// RouteMatch is the result of a RouteTable lookup.
type RouteMatch[T any] struct {
	// Value is the registered value.
	Value T
	// Params are the decoded parameter values (nil in All).
	Params map[string]string
	// Template is the matching template.
	Template *PathTemplate
}

// Lookup returns the route for (method, path), path in escaped form
// without the query: an exact literal template first, else the matching
// template with the fewest parameters. RCNS §6.
func (rt *RouteTable[T]) Lookup(method, path string) (RouteMatch[T], bool) {
	for _, r := range rt.byMethod[method] {
		if params, ok := r.tmpl.Match(path); ok {
			return RouteMatch[T]{Value: r.value, Params: params, Template: r.tmpl}, true
		}
	}
	return RouteMatch[T]{}, false
}

// MethodsForPath returns, sorted, the methods that have a route matching
// path (the 405 body's allowed_methods_for_path, RCNS §5.5); empty, never
// nil.
func (rt *RouteTable[T]) MethodsForPath(path string) []string {
	out := []string{}
	for m, rs := range rt.byMethod {
		for _, r := range rs {
			if _, ok := r.tmpl.Match(path); ok {
				out = append(out, m)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// Len returns the number of registered routes.
func (rt *RouteTable[T]) Len() int { return rt.n }

// All returns every route ordered by method, then template string, with
// Params nil.
func (rt *RouteTable[T]) All() []RouteMatch[T] {
	var rs []*route[T]
	for _, l := range rt.byMethod {
		rs = append(rs, l...)
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].method != rs[j].method {
			return rs[i].method < rs[j].method
		}
		if rs[i].tmpl.raw != rs[j].tmpl.raw {
			return rs[i].tmpl.raw < rs[j].tmpl.raw
		}
		return rs[i].seq < rs[j].seq
	})
	out := make([]RouteMatch[T], len(rs))
	for i, r := range rs {
		out[i] = RouteMatch[T]{Value: r.value, Template: r.tmpl}
	}
	return out
}

// NormalizePath returns an escaped request path in the RFC 3986 §6.2.2
// normal form the route table, recipe patterns and contracts compare:
// percent-encoded unreserved characters (ALPHA DIGIT "-" "." "_" "~") are
// decoded and the hex digits of the remaining escapes are upper-cased,
// so "/%72oom" and "/room" name one pair. It fails on a malformed escape
// and on a path whose decoded bytes are not valid UTF-8 (a segment no
// upstream can be asked for).
func NormalizePath(escaped string) (string, error) {
	if !strings.Contains(escaped, "%") {
		return escaped, nil
	}
	var b strings.Builder
	b.Grow(len(escaped))
	decoded := make([]byte, 0, len(escaped))
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c != '%' {
			b.WriteByte(c)
			decoded = append(decoded, c)
			continue
		}
		if i+2 >= len(escaped) || !isHex(escaped[i+1]) || !isHex(escaped[i+2]) {
			return "", fmt.Errorf("malformed percent-encoding at byte %d", i)
		}
		v := unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
		decoded = append(decoded, v)
		if isUnreserved(v) {
			b.WriteByte(v)
		} else {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(escaped[i+1 : i+3]))
		}
		i += 2
	}
	if !utf8.Valid(decoded) {
		return "", errors.New("the decoded path is not valid UTF-8")
	}
	return b.String(), nil
}

func isUnreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
