package openapi

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// body is an operation's JSON request body, as the import reads it.
type body struct {
	ptr      string // the schema of the chosen media type ("" when it has none)
	required bool   // requestBody.required
	// props are the body's properties when it is an object the input
	// can hold property by property (flattened), in order; nil when the
	// whole body becomes one input property.
	props []bodyProp
	req   []string // the body's required properties when flattened
	flat  bool
}

type bodyProp struct {
	name, ptr string
}

// jsonMediaType picks the JSON media type of content: application/json,
// else the first (by name) application/*+json or with parameters.
func jsonMediaType(content openapi3.Content) (string, bool) {
	if _, ok := content["application/json"]; ok {
		return "application/json", true
	}
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		base := strings.ToLower(strings.TrimSpace(strings.SplitN(k, ";", 2)[0]))
		if base == "application/json" || strings.HasPrefix(base, "application/") && strings.HasSuffix(base, "+json") {
			return k, true
		}
	}
	return "", false
}

func mediaList(content openapi3.Content) string {
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// requestBody reads op's request body: nil when it has none. A body
// with no JSON media type skips the operation, required or not: without
// its body (a file, a form) the call would not do what it is for.
func (im *importer) requestBody(op *operation, params []*param, n *notes) (*body, error) {
	rb := op.kop.RequestBody
	if rb == nil || rb.Value == nil {
		return nil, nil
	}
	rbPtr, err := im.ix.follow(op.ptr + "/requestBody")
	if err != nil {
		return nil, skipf(op.ptr+"/requestBody", "%v", err)
	}
	mt, ok := jsonMediaType(rb.Value.Content)
	if !ok {
		return nil, skipf(rbPtr+"/content", "the request body is %s; an endpoint sends JSON bodies only", mediaList(rb.Value.Content))
	}
	b := &body{required: rb.Value.Required}
	sp := rbPtr + "/content/" + escapeToken(mt) + "/schema"
	if _, has := lookup(im.root, sp); has {
		b.ptr = sp
	}
	if b.ptr == "" {
		return b, nil
	}
	taken := map[string]bool{}
	for _, p := range params {
		taken[p.k.Name] = true
		taken[nonParamChars.ReplaceAllString(p.k.Name, "_")] = true
	}
	if props, req, ok := im.flattenable(b.ptr); ok && !slices.ContainsFunc(props, func(p bodyProp) bool { return taken[p.name] }) {
		b.flat, b.props, b.req = true, props, req
		if !b.required && len(req) > 0 {
			n.add(rbPtr, "the request body is optional upstream, but its required properties are required in the input")
		}
	}
	return b, nil
}

// flatKeywords may appear in a request body schema whose properties
// become input properties one by one.
var flatKeywords = []string{"type", "properties", "required", "title", "description", "additionalProperties", "allOf",
	"readOnly", "writeOnly", "deprecated", "example", "examples", "$comment", "$ref"}

// flattenable reports whether the schema at p is an object the input can
// hold property by property: only properties and required (also through
// $ref and allOf), no other constraint, no additional properties
// allowed explicitly, no property declared twice.
func (im *importer) flattenable(p string) ([]bodyProp, []string, bool) {
	var props []bodyProp
	var req []string
	seen := map[string]bool{}
	var walk func(p string, depth int) bool
	walk = func(p string, depth int) bool {
		if depth > 32 {
			return false
		}
		v, _ := lookup(im.root, p)
		o, ok := v.(*object)
		if !ok {
			return false
		}
		if o.has("$ref") {
			if !walk(im.ix.target(p), depth+1) {
				return false
			}
			if im.v30 {
				return true
			}
		}
		for _, k := range o.keys {
			if strings.HasPrefix(k, "x-") || slices.Contains(droppedKeywords, k) {
				continue
			}
			if !slices.Contains(flatKeywords, k) {
				return false
			}
		}
		if t, has := o.get("type"); has && t != "object" {
			return false
		}
		if ap, has := o.get("additionalProperties"); has && ap != false {
			return false
		}
		for i := range o.arr("allOf") {
			if !walk(p+"/allOf/"+strconv.Itoa(i), depth+1) {
				return false
			}
		}
		if m := o.obj("properties"); m != nil {
			for _, name := range m.keys {
				if seen[name] {
					return false
				}
				seen[name] = true
				props = append(props, bodyProp{name: name, ptr: p + "/properties/" + escapeToken(name)})
			}
		}
		for _, r := range stringList(o.arr("required")) {
			if !slices.Contains(req, r) {
				req = append(req, r)
			}
		}
		return true
	}
	if !walk(p, 0) {
		return nil, nil, false
	}
	for _, r := range req {
		if !seen[r] {
			return nil, nil, false // required but not declared: keep the schema whole
		}
	}
	return props, req, true
}

// input builds input_schema, the query mapping and the body mapping.
func (im *importer) input(op *operation, params []*param, rt *route, b *body, t *translator, n *notes) (*object, *object, string, error) {
	props := newObject()
	var required []any
	query := newObject()
	type pending struct {
		name, ptr string
		p         *param
	}
	var queryParams []pending
	for _, p := range params {
		switch p.k.In {
		case openapi3.ParameterInPath:
			prop, ok := rt.props[p.k.Name]
			if !ok {
				return nil, nil, "", skipf(p.ptr, "path parameter %q does not appear in the path %s", p.k.Name, op.path)
			}
			p.prop = prop
		case openapi3.ParameterInQuery:
			name := p.k.Name
			if slices.Contains(mapValues(rt.props), name) {
				name += "_query"
				n.add(p.ptr, "query parameter %q is the input property %q (a path parameter has its name)", p.k.Name, name)
			}
			p.prop = name
			if _, has := lookup(im.root, p.ptr+"/schema"); !has {
				if p.k.Required {
					return nil, nil, "", skipf(p.ptr, "required query parameter %q is described by content, not a schema; the import maps schema parameters only", p.k.Name)
				}
				n.add(p.ptr, "optional query parameter %q is described by content, not a schema; it is never sent", p.k.Name)
				continue
			}
			queryParams = append(queryParams, pending{name: name, ptr: p.ptr + "/schema", p: p})
			t.scan(p.ptr+"/schema", nil)
		}
	}
	if b != nil && b.ptr != "" {
		if b.flat {
			for _, bp := range b.props {
				t.scan(bp.ptr, nil)
			}
		} else {
			t.scan(b.ptr, nil)
		}
	}
	// Path parameters first, in the order of the path.
	for _, seg := range strings.Split(rt.agtp, "/") {
		if !strings.HasPrefix(seg, "{") {
			continue
		}
		prop := strings.Trim(seg, "{}")
		for _, p := range params {
			if p.k.In == openapi3.ParameterInPath && p.prop == prop {
				props.set(prop, im.pathParamSchema(p, n))
				required = append(required, prop)
			}
		}
	}
	for _, rp := range rt.props {
		if !props.has(rp) {
			return nil, nil, "", skipf("/paths/"+escapeToken(op.path), "path parameter {%s} is not declared in parameters", rp)
		}
	}
	for _, q := range queryParams {
		s := t.emit(q.ptr)
		if so, ok := s.(*object); ok {
			if q.p.k.Description != "" && !so.has("description") {
				so.set("description", q.p.k.Description)
			}
			if q.p.k.Deprecated && !so.has("deprecated") {
				so.set("deprecated", true)
			}
		}
		expr, err := im.queryExpr(q.p, q.name, q.ptr, n)
		if err != nil {
			return nil, nil, "", err
		}
		if expr == "" {
			continue
		}
		props.set(q.name, s)
		if q.p.k.Required {
			required = append(required, q.name)
		}
		query.set(q.p.k.Name, expr)
	}
	bodyExpr := ""
	switch {
	case b == nil:
		if op.method == http.MethodPost || op.method == http.MethodPut || op.method == http.MethodPatch {
			bodyExpr = "{}"
		}
	case b.flat:
		var removed []string
		for _, bp := range b.props {
			if t.flag(bp.ptr, "readOnly") {
				n.add(bp.ptr, "readOnly: left out of the input (OpenAPI: not sent in a request)")
				removed = append(removed, bp.name)
				continue
			}
			props.set(bp.name, t.emit(bp.ptr))
		}
		for _, r := range b.req {
			if !slices.Contains(removed, r) {
				required = append(required, r)
			}
		}
		var drop []string
		for _, k := range props.keys {
			if !slices.ContainsFunc(b.props, func(bp bodyProp) bool { return bp.name == k }) {
				drop = append(drop, jqField(k))
			}
		}
		bodyExpr = "."
		if len(drop) > 0 {
			bodyExpr = "del(" + strings.Join(drop, ", ") + ")"
		}
	default:
		name := "body"
		for props.has(name) {
			name = "request_" + name
		}
		if b.ptr == "" {
			props.set(name, true)
		} else {
			props.set(name, t.emit(b.ptr))
		}
		if b.required {
			required = append(required, name)
		} else {
			n.add(b.ptr, "the request body is optional: an input without %q sends the JSON null as the body", name)
		}
		bodyExpr = jqField(name)
	}
	in := newObject()
	in.set("type", "object")
	in.set("additionalProperties", false)
	if len(required) > 0 {
		in.set("required", required)
	}
	in.set("properties", props)
	return t.withDefs(in).(*object), query, bodyExpr, nil
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// jqKeywords cannot follow a '.' as a field name in jq.
var jqKeywords = []string{"and", "or", "not", "if", "then", "elif", "else", "end", "as", "def", "reduce", "foreach", "try", "catch", "label", "import", "include", "__loc__"}

var jqIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// jqField is the jq expression reading input field name.
func jqField(name string) string {
	if jqIdent.MatchString(name) && !slices.Contains(jqKeywords, name) {
		return "." + name
	}
	var b bytes.Buffer
	writeString(&b, name)
	return ".[" + b.String() + "]"
}

// resolved returns the schema object at p after its $ref chain.
func (im *importer) resolved(p string) *object {
	if f, err := im.ix.follow(p); err == nil {
		p = f
	}
	v, _ := lookup(im.root, p)
	o, _ := v.(*object)
	return o
}

// schemaType is the one non-null type of a schema, or "".
func schemaType(o *object) string {
	switch t := o.vals["type"].(type) {
	case string:
		return t
	case []any:
		var out []string
		for _, e := range t {
			if s, _ := e.(string); s != "null" {
				out = append(out, s)
			}
		}
		if len(out) == 1 {
			return out[0]
		}
	}
	return ""
}

// queryExpr is the jq expression sending query parameter p from input
// property prop: the value as it is, or an array joined by the
// delimiter of its style. An object parameter cannot be sent ("" and a
// note, or a skip when it is required).
func (im *importer) queryExpr(p *param, prop, sptr string, n *notes) (string, error) {
	field := jqField(prop)
	s := im.resolved(sptr)
	switch schemaType(s) {
	case "array":
		delim := ","
		switch p.k.Style {
		case "spaceDelimited":
			delim = " "
		case "pipeDelimited":
			delim = "|"
		case "", "form":
			if p.k.Explode == nil || *p.k.Explode {
				n.add(p.ptr, "query parameter %q (an array, style form, explode true) is sent as one comma-separated value (name=a,b), as explode: false would; check the upstream accepts it", p.k.Name)
			}
		default:
			return im.unsendable(p, n, "style "+p.k.Style)
		}
		var q bytes.Buffer
		writeString(&q, delim)
		return fmt.Sprintf("%s | if . == null then null else map(tostring) | join(%s) end", field, q.String()), nil
	case "object":
		return im.unsendable(p, n, "an object")
	}
	return field, nil
}

func (im *importer) unsendable(p *param, n *notes, what string) (string, error) {
	if p.k.Required {
		return "", skipf(p.ptr, "required query parameter %q is %s, which a query mapping cannot send", p.k.Name, what)
	}
	n.add(p.ptr, "optional query parameter %q is %s, which a query mapping cannot send; left out", p.k.Name, what)
	return "", nil
}

// pathParamSchema is the input schema of a path parameter: its value
// reaches the endpoint as a path segment, a string, so an integer,
// number or boolean parameter becomes a string of that form (a pattern
// or an enum), and constraints that only numbers have are noted.
func (im *importer) pathParamSchema(p *param, n *notes) *object {
	out := newObject()
	out.set("type", "string")
	if d := p.k.Description; d != "" {
		out.set("description", d)
	}
	minLen := 1
	s := im.resolved(p.ptr + "/schema")
	sp := p.ptr + "/schema"
	if s == nil {
		out.set("minLength", number("1"))
		return out
	}
	if d := s.str("description"); d != "" && !out.has("description") {
		out.set("description", d)
	}
	ty := schemaType(s)
	var dropped []string
	for _, k := range s.keys {
		switch k {
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf":
			dropped = append(dropped, k)
		case "allOf", "anyOf", "oneOf", "not", "const":
			dropped = append(dropped, k)
		}
	}
	switch ty {
	case "integer":
		out.set("pattern", "^-?[0-9]+$")
	case "number":
		out.set("pattern", `^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)
	case "boolean":
		out.set("enum", []any{"true", "false"})
	case "string", "":
		if ty == "" && len(s.keys) > 0 && !s.has("description") {
			n.add(sp, "path parameter %q has no single type; any non-empty segment is accepted", p.k.Name)
		}
		if v, ok := s.get("minLength"); ok {
			if l, err := strconv.Atoi(fmt.Sprint(v)); err == nil && l > minLen {
				minLen = l
			}
		}
		if v, ok := s.get("maxLength"); ok {
			out.set("maxLength", v)
		}
		if pat := s.str("pattern"); pat != "" {
			if _, err := regexp.Compile(pat); err == nil {
				out.set("pattern", pat)
			} else {
				n.add(sp+"/pattern", "pattern %q is not an RE2 regular expression; not translated", pat)
			}
		}
		if f := s.str("format"); f != "" {
			out.set("format", f)
		}
	default:
		n.add(sp, "path parameter %q is of type %s; any non-empty segment is accepted", p.k.Name, ty)
	}
	if e := s.arr("enum"); e != nil {
		var vals []any
		for _, v := range e {
			switch x := v.(type) {
			case string:
				vals = append(vals, x)
			case number:
				vals = append(vals, string(x))
			case bool:
				vals = append(vals, strconv.FormatBool(x))
			}
		}
		if len(vals) > 0 {
			out.set("enum", vals)
		}
	}
	out.set("minLength", number(strconv.Itoa(minLen)))
	if len(dropped) > 0 {
		n.add(sp, "path parameter %q: %s not checked (the value arrives as a path segment, a string)", p.k.Name, strings.Join(dropped, ", "))
	}
	return out
}
