package openapi

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
)

// param is one parameter of an operation, its $ref followed.
type param struct {
	k    *openapi3.Parameter
	ptr  string // the Parameter Object
	prop string // the input property it becomes
}

// route is the AGTP path an operation's path becomes.
type route struct {
	agtp     string            // AGTP path template
	upstream string            // upstream path template (parameter names reduced)
	renamed  []string          // "order → orders", one per renamed segment
	props    map[string]string // OpenAPI path parameter name → input property
}

// skipError is an operation the import cannot serve, with the pointer
// of the cause.
type skipError struct{ ptr, reason string }

func (e *skipError) Error() string { return e.reason }

func skipf(ptr, format string, args ...any) *skipError {
	return &skipError{ptr: ptr, reason: fmt.Sprintf(format, args...)}
}

// operation translates one selected operation into an endpoint
// document, or says why it is skipped. Refusals go to im.errs.
func (im *importer) operation(op *operation) (*Endpoint, *Skipped) {
	ep, err := im.translate(op)
	if err != nil {
		var se *skipError
		if asSkip(err, &se) {
			return nil, &Skipped{Operation: op.name(), OperationID: op.id, HTTPMethod: op.method, HTTPPath: op.path, Pointer: se.ptr, Reason: se.reason}
		}
		return nil, nil
	}
	return ep, nil
}

func asSkip(err error, se **skipError) bool {
	s, ok := err.(*skipError)
	if ok {
		*se = s
	}
	return ok
}

// errRefused marks an operation refused with an error in im.errs.
var errRefused = fmt.Errorf("refused")

func (im *importer) translate(op *operation) (*Endpoint, error) {
	if op.kop == nil || op.kitem == nil {
		return nil, skipf(op.ptr, "kin-openapi did not read this operation") // never expected after Validate
	}
	n := &notes{}
	ov := im.opts.Overrides[op.key()]
	agtpMethod, err := im.methodFor(op, ov)
	if err != nil {
		return nil, err
	}
	params, err := im.parameters(op)
	if err != nil {
		return nil, err
	}
	rt, err := im.route(op)
	if err != nil {
		return nil, err
	}
	ep := &Endpoint{Operation: op.name(), OperationID: op.id, HTTPMethod: op.method, HTTPPath: op.path,
		Method: agtpMethod, Path: rt.agtp}
	switch {
	case ov.Path != "":
		if _, err := im.mp.ParsePathTemplate(ov.Path); err != nil {
			im.errs.add(op.name(), op.ptr, "map entry path %s: %v", ov.Path, err)
			return nil, errRefused
		}
		ep.Path, ep.Proposed, ep.Accepted = ov.Path, len(rt.renamed) > 0, true
	case len(rt.renamed) > 0:
		ep.Proposed, ep.Accepted = true, im.opts.AcceptRenames
		if !ep.Accepted {
			im.errs.add(op.name(), "/paths/"+escapeToken(op.path),
				"the path has a segment equal to an AGTP method name, which AGTP paths cannot have (RCNS §6): %s; proposed AGTP path %s: accept it with --accept-renames, or set a path in a map file (operations: {%q: {path: ...}})",
				strings.Join(rt.renamed, ", "), rt.agtp, op.key())
		}
	}
	if ep.Path != op.path && !ep.Proposed {
		n.add("", "AGTP path %s differs from the upstream path %s (AGTP paths have no trailing '/' and parameter names of A-Z a-z 0-9 _ only)", ep.Path, op.path)
	}
	if ep.Proposed && ep.Accepted {
		n.add("", "AGTP path %s renames the upstream path %s: %s (RCNS §6: no segment may equal a method name)", ep.Path, op.path, strings.Join(rt.renamed, ", "))
	}

	d := &yamlDoc{comments: map[string]string{}}
	root := newObject()
	d.root = root
	root.set("method", ep.Method)
	root.set("path", ep.Path)
	switch {
	case ov.Method != "":
		d.comments["/method"] = "from the map file"
	case ep.Method != im.defaultMethod(op):
		d.comments["/method"] = "review: QUERY because the GET declares query parameters (--query-for-search)"
	default:
		d.comments["/method"] = fmt.Sprintf("from %s (the catalog's legacy alias, or --method-map)", op.method)
	}
	if ov.Path != "" {
		d.comments["/path"] = "from the map file"
	}
	if ep.Proposed && ov.Path == "" {
		d.comments["/path"] = "review: renamed from " + op.path
	}
	root.set("description", im.description(op))
	im.semantic(op, ep.Method, root, d)

	// input_schema and the upstream mapping
	in := newTranslator(im.ix, im.v30, toUpstream, n)
	body, err := im.requestBody(op, params, n)
	if err != nil {
		return nil, err
	}
	input, query, bodyExpr, err := im.input(op, params, rt, body, in, n)
	if err != nil {
		return nil, err
	}
	root.set("input_schema", input)

	output, errorMap, err := im.output(op, n, d)
	if err != nil {
		return nil, err
	}
	root.set("output_schema", output)

	errNames := append([]any(nil), toAny(recipes.UpstreamErrors)...)
	for _, code := range sortedKeys(errorMap) {
		if !slices.Contains(errNames, any(errorMap[code])) {
			errNames = append(errNames, errorMap[code])
		}
	}
	root.set("errors", errNames)

	headers, scopes, err := im.security(op, params, n, d)
	if err != nil {
		return nil, err
	}
	scopes, err = im.scopes(op, ov, scopes)
	if err != nil {
		return nil, err
	}
	root.set("required_scopes", toAny(scopes))
	if len(scopes) == 0 {
		d.comments["/required_scopes"] = "review: none, so any identified agent may call it (--scope, " + im.scopesExtension() + ")"
	}
	if op.kop.Deprecated {
		dep := newObject()
		dep.set("deprecated_in", orDefault(im.kdoc.Info.Version, "1"))
		root.set("deprecated", dep)
		d.comments["/deprecated/deprecated_in"] = "review: the operation is deprecated; the document's info.version"
	}

	svc := newObject()
	svc.set("upstream", im.opts.Upstream)
	svc.set("method", op.method)
	svc.set("path", rt.upstream)
	if query.len() > 0 {
		svc.set("query", query)
	}
	if bodyExpr != "" {
		svc.set("body", bodyExpr)
	}
	if len(headers) > 0 {
		h := newObject()
		for _, k := range sortedKeys(headers) {
			h.set(k, headers[k])
		}
		svc.set("headers", h)
	}
	if len(errorMap) > 0 {
		em := newObject()
		for _, k := range sortedKeys(errorMap) {
			em.set(k, errorMap[k])
		}
		svc.set("error_map", em)
		d.comments["/external_service/error_map"] = "from the operation's declared 4xx responses"
	}
	if im.opts.TimeoutSeconds != 0 {
		svc.set("timeout_seconds", number(strconv.FormatFloat(im.opts.TimeoutSeconds, 'g', -1, 64)))
	}
	root.set("external_service", svc)

	ep.File = im.fileName(op)
	if prev, dup := im.files[strings.ToLower(ep.File)]; dup {
		im.errs.add(op.name(), op.ptr, "its file %s would overwrite the file of %s (names compared without case); give one of them another operationId", ep.File, prev.name())
		return nil, errRefused
	}
	im.files[strings.ToLower(ep.File)] = op
	ep.Notes = n.list
	d.header = im.header(op, n.list)
	ep.Data = d.encode()
	svc.del("headers")
	ep.check = d.encode()
	return ep, nil
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// defaultMethod is the AGTP method op's HTTP method maps to, without
// --query-for-search or a map entry.
func (im *importer) defaultMethod(op *operation) string {
	if m, ok := im.opts.MethodMap[op.method]; ok {
		return m
	}
	return defaultMethodMap[op.method]
}

// methodFor picks the AGTP method of op.
func (im *importer) methodFor(op *operation, ov Override) (string, error) {
	if op.method == http.MethodTrace {
		return "", skipf(op.ptr, "TRACE operations cannot be imported: an endpoint's upstream call is GET, PUT, POST, DELETE, PATCH, HEAD or OPTIONS")
	}
	if ov.Method != "" {
		return ov.Method, nil
	}
	m := im.defaultMethod(op)
	if m == "" {
		return "", skipf(op.ptr, "%s operations are imported only when --method-map %s=METHOD names an AGTP method for them", op.method, op.method)
	}
	if im.opts.QueryForSearch && op.method == http.MethodGet {
		for _, p := range im.mustParameters(op) {
			if p.k.In == openapi3.ParameterInQuery {
				return "QUERY", nil
			}
		}
	}
	return m, nil
}

// mustParameters is parameters without the error (methodFor runs before
// the parameters are checked).
func (im *importer) mustParameters(op *operation) []*param {
	ps, _ := im.parameters(op)
	return ps
}

// parameters lists op's parameters: the Path Item's, replaced by the
// operation's of the same name and location, then the operation's
// others, in document order.
func (im *importer) parameters(op *operation) ([]*param, error) {
	var out []*param
	add := func(list openapi3.Parameters, base string, override bool) error {
		for i, pr := range list {
			if pr == nil || pr.Value == nil {
				continue
			}
			ptr, err := im.ix.follow(base + "/parameters/" + strconv.Itoa(i))
			if err != nil {
				return skipf(base+"/parameters/"+strconv.Itoa(i), "%v", err)
			}
			p := &param{k: pr.Value, ptr: ptr}
			if override {
				if j := slices.IndexFunc(out, func(q *param) bool { return q.k.In == p.k.In && q.k.Name == p.k.Name }); j >= 0 {
					out[j] = p
					continue
				}
			}
			out = append(out, p)
		}
		return nil
	}
	if err := add(op.kitem.Parameters, op.itemPtr, false); err != nil {
		return nil, err
	}
	if err := add(op.kop.Parameters, op.ptr, true); err != nil {
		return nil, err
	}
	return out, nil
}

var nonParamChars = regexp.MustCompile(`[^A-Za-z0-9_]`)

// route builds the AGTP path of op from its path: parameters keep their
// place with their names reduced to A-Z a-z 0-9 _, a trailing '/' goes,
// and a literal segment equal to a method name (RCNS §6) is renamed: its
// plural when that is free, else the segment with "-items".
func (im *importer) route(op *operation) (*route, error) {
	ptr := "/paths/" + escapeToken(op.path)
	rt := &route{props: map[string]string{}}
	if op.path == "/" {
		rt.agtp, rt.upstream = "/", "/"
		return rt, nil
	}
	segs := strings.Split(strings.TrimPrefix(op.path, "/"), "/")
	var agtp, upstream []string
	for i, seg := range segs {
		switch {
		case seg == "" && i == len(segs)-1:
			upstream = append(upstream, "")
			continue
		case seg == "":
			return nil, skipf(ptr, "the path has an empty segment (\"//\")")
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && strings.Count(seg, "{") == 1:
			name := seg[1 : len(seg)-1]
			prop := nonParamChars.ReplaceAllString(name, "_")
			if prop == "" {
				return nil, skipf(ptr, "path parameter %q has an empty name", seg)
			}
			for other, p := range rt.props {
				if p == prop {
					return nil, skipf(ptr, "path parameters {%s} and {%s} reduce to the same name %s (AGTP parameter names are A-Z a-z 0-9 _)", other, name, prop)
				}
			}
			rt.props[name] = prop
			agtp = append(agtp, "{"+prop+"}")
			upstream = append(upstream, "{"+prop+"}")
		case strings.ContainsAny(seg, "{}"):
			return nil, skipf(ptr, "segment %q holds a parameter inside other text; AGTP and upstream path templates take whole-segment {name} parameters only (RCNS §6)", seg)
		default:
			upstream = append(upstream, seg)
			ref := im.mp.CheckPath("/" + seg)
			if ref == nil {
				agtp = append(agtp, seg)
				continue
			}
			if !im.mp.IsReservedSegment(seg) {
				return nil, skipf(ptr, "segment %q: %s", seg, ref.Explanation)
			}
			renamed := ""
			for _, c := range []string{pluralNoun(seg), seg + "-items", seg + "-resource"} {
				if im.mp.CheckPath("/"+c) == nil {
					renamed = c
					break
				}
			}
			if renamed == "" {
				return nil, skipf(ptr, "segment %q equals a method name and no rename was found; set an AGTP path in a map file", seg)
			}
			rt.renamed = append(rt.renamed, seg+" → "+renamed)
			agtp = append(agtp, renamed)
		}
	}
	rt.agtp = "/" + strings.Join(agtp, "/")
	rt.upstream = "/" + strings.Join(upstream, "/")
	return rt, nil
}

// pluralNoun is a simple English plural of a path segment (search →
// searches, inventory → inventories, order → orders).
func pluralNoun(s string) string {
	l := strings.ToLower(s)
	switch {
	case strings.HasSuffix(l, "s"), strings.HasSuffix(l, "x"), strings.HasSuffix(l, "z"),
		strings.HasSuffix(l, "ch"), strings.HasSuffix(l, "sh"):
		return s + "es"
	case strings.HasSuffix(l, "y") && len(l) > 1 && !strings.ContainsRune("aeiou", rune(l[len(l)-2])):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}

// description is the endpoint's description: the operation's
// description, else its summary, else a sentence naming the call.
func (im *importer) description(op *operation) string {
	if d := strings.TrimSpace(op.kop.Description); d != "" {
		return d
	}
	if s := strings.TrimSpace(op.kop.Summary); s != "" {
		return s
	}
	return fmt.Sprintf("Calls %s %s on the upstream %s.", op.method, op.path, im.opts.Upstream)
}

// semantic writes the semantic block (RCNS §7.2), guessed from the
// operation's summary and its HTTP method, each guess marked for review.
func (im *importer) semantic(op *operation, agtpMethod string, root *object, d *yamlDoc) {
	s := newObject()
	intent := firstSentence(op.kop.Summary)
	intentFrom := "the operation's summary"
	if intent == "" {
		intent, intentFrom = firstSentence(op.kop.Description), "the operation's description"
	}
	if intent == "" {
		intent, intentFrom = fmt.Sprintf("Call %s %s on %s.", op.method, op.path, im.opts.Upstream), "the HTTP call"
	}
	s.set("intent", intent)
	d.comments["/semantic/intent"] = "review: from " + intentFrom
	s.set("actor", "agent")
	d.comments["/semantic/actor"] = "review: guessed"
	safe := op.method == http.MethodGet || op.method == http.MethodHead || op.method == http.MethodOptions
	outcome, capability, impact := "", "", ""
	switch op.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		outcome, capability, impact = "The upstream's answer is returned; nothing is changed.", "retrieval", "informational"
		if agtpMethod == "QUERY" {
			capability = "discovery"
		}
	case http.MethodPost:
		outcome, capability, impact = "The upstream has processed the input (usually creating a resource) and its answer is returned.", "creation", "reversible"
	case http.MethodPut:
		outcome, capability, impact = "The upstream resource is replaced with the input and the upstream's answer is returned.", "modification", "reversible"
	case http.MethodPatch:
		outcome, capability, impact = "The upstream resource is updated with the input and the upstream's answer is returned.", "modification", "reversible"
	case http.MethodDelete:
		outcome, capability, impact = "The upstream resource is removed and the upstream's answer is returned.", "modification", "irreversible"
	}
	s.set("outcome", outcome)
	d.comments["/semantic/outcome"] = "review: guessed from the HTTP method"
	s.set("capability", capability)
	d.comments["/semantic/capability"] = "review: guessed from the HTTP method"
	s.set("confidence", number("0.5"))
	d.comments["/semantic/confidence"] = "review: the import cannot know it"
	s.set("impact", impact)
	if safe {
		d.comments["/semantic/impact"] = op.method + " is safe (RFC 9110 §9.2.1)"
	} else {
		d.comments["/semantic/impact"] = "review: guessed from the HTTP method"
	}
	idem := op.method != http.MethodPost && op.method != http.MethodPatch
	s.set("is_idempotent", idem)
	d.comments["/semantic/is_idempotent"] = fmt.Sprintf("%s is %sidempotent (RFC 9110 §9.2.2)", op.method, map[bool]string{true: "", false: "not "}[idem])
	root.set("semantic", s)
}

// firstSentence is the first line of s, cut after its first sentence.
func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if len(s) > 300 {
		s = strings.TrimSpace(s[:300]) + "…"
	}
	return s
}

// fileName is the endpoint document's file name: the operationId (its
// characters outside A-Z a-z 0-9 . _ - replaced by '_'), else the method
// and path.
func (im *importer) fileName(op *operation) string {
	base := op.id
	if base == "" {
		base = strings.ToLower(op.method) + "-" + strings.Trim(strings.NewReplacer("{", "", "}", "", "/", "-").Replace(op.path), "-")
	}
	base = defNameChars.ReplaceAllString(base, "_")
	base = strings.TrimLeft(base, ".")
	if base == "" {
		base = "root"
	}
	return base + ".yaml"
}

// header is the comment at the top of a generated document.
func (im *importer) header(op *operation, notes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Imported by `caddy rcns import-openapi` from %s:\noperation %s, at %s.\n", orDefault(im.opts.Source, "the document"), op.name(), op.ptr)
	b.WriteString("Review every field marked \"review:\" before serving it; a re-import rewrites this file.")
	if len(notes) > 0 {
		b.WriteString("\n\nNot carried over faithfully (review):")
		for _, n := range notes {
			b.WriteString("\n- " + n)
		}
	}
	return b.String()
}

// scopesExtension is the extension naming an operation's scopes.
func (im *importer) scopesExtension() string {
	return orDefault(im.opts.ScopesExtension, DefaultScopesExtension)
}

// scopes is the endpoint's required_scopes: Options.Scopes, the map
// entry's, the operation's extension (else the document's), and those
// the security requirement contributed, sorted and unique.
func (im *importer) scopes(op *operation, ov Override, fromSecurity []string) ([]string, error) {
	all := append(append(slices.Clone(im.opts.Scopes), ov.Scopes...), fromSecurity...)
	ext := im.scopesExtension()
	ptr := op.ptr + "/" + escapeToken(ext)
	v, ok := op.raw.get(ext)
	if !ok {
		v, ok = im.root.get(ext)
		ptr = "/" + escapeToken(ext)
	}
	if ok {
		list, isList := v.([]any)
		if !isList {
			im.errs.add(op.name(), ptr, "%s must be a list of scope tokens", ext)
			return nil, errRefused
		}
		for i, e := range list {
			s, _ := e.(string)
			if _, err := policy.ParseScope(s); err != nil {
				im.errs.add(op.name(), ptr+"/"+strconv.Itoa(i), "scope %q: %v", s, err)
				return nil, errRefused
			}
			all = append(all, s)
		}
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}
