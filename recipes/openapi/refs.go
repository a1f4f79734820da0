package openapi

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// httpMethods are the operation fields of a Path Item Object, in the
// order the import lists them.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// refSite is one "$ref" member of the document.
type refSite struct {
	ptr    string // pointer of the object holding the $ref
	ref    string // the $ref as written
	base   string // base URI for a schema $ref (OpenAPI 3.1), else ""
	schema bool   // the $ref stands for a Schema Object
	target string // the resolved local pointer, set by resolveRefs
}

// index is what the import knows about the structure of the raw
// document: every $ref, every Schema Object, and the schema identifiers
// ($id, $anchor) of OpenAPI 3.1.
type index struct {
	root    any
	v31     bool
	refs    []*refSite
	schemas map[string]bool   // pointers of Schema Objects
	ids     map[string]string // absolute $id URI (no fragment) → pointer
	anchors map[string]string // absolute $id URI + "#" + $anchor → pointer
	// unknown are the schema keywords the import does not know (outside
	// x-), collected so the library's validation lets the translation
	// report them instead.
	unknown map[string]bool
	// keywords are all the schema keywords the document uses.
	keywords map[string]bool
}

// documentBase is the base URI schema identifiers resolve against: a
// document read from a file has no retrieval URI the import trusts.
const documentBase = "https://openapi-import.invalid/document"

// buildIndex walks the document by its OpenAPI structure (so a "$ref"
// key inside an example or default value is data, not a reference).
func buildIndex(root any, v31 bool) *index {
	ix := &index{root: root, v31: v31, schemas: map[string]bool{}, ids: map[string]string{}, anchors: map[string]string{}, unknown: map[string]bool{}, keywords: map[string]bool{}}
	doc, _ := root.(*object)
	w := &walker{ix: ix}
	w.mapOf(doc.obj("paths"), "/paths", w.pathItem)
	w.mapOf(doc.obj("webhooks"), "/webhooks", w.pathItem)
	if c := doc.obj("components"); c != nil {
		w.mapOf(c.obj("schemas"), "/components/schemas", func(v any, p string) { w.schema(v, p, documentBase) })
		w.mapOf(c.obj("responses"), "/components/responses", w.response)
		w.mapOf(c.obj("parameters"), "/components/parameters", w.parameter)
		w.mapOf(c.obj("examples"), "/components/examples", w.example)
		w.mapOf(c.obj("requestBodies"), "/components/requestBodies", w.requestBody)
		w.mapOf(c.obj("headers"), "/components/headers", w.parameter)
		w.mapOf(c.obj("securitySchemes"), "/components/securitySchemes", w.plainRef)
		w.mapOf(c.obj("links"), "/components/links", w.plainRef)
		w.mapOf(c.obj("callbacks"), "/components/callbacks", w.callback)
		w.mapOf(c.obj("pathItems"), "/components/pathItems", w.pathItem)
	}
	return ix
}

type walker struct{ ix *index }

// ref records o's $ref, if any, and reports whether o is a Reference.
func (w *walker) ref(o *object, p string, schema bool, base string) bool {
	v, ok := o.get("$ref")
	if !ok {
		return false
	}
	s, _ := v.(string)
	if _, isStr := v.(string); !isStr {
		s = "\x00" // not a string: reported by resolveRefs
	}
	w.ix.refs = append(w.ix.refs, &refSite{ptr: p, ref: s, base: base, schema: schema})
	return true
}

func (w *walker) mapOf(o *object, p string, f func(any, string)) {
	if o == nil {
		return
	}
	for _, k := range o.keys {
		if strings.HasPrefix(k, "x-") {
			continue
		}
		f(o.vals[k], p+"/"+escapeToken(k))
	}
}

func (w *walker) listOf(a []any, p string, f func(any, string)) {
	for i, e := range a {
		f(e, p+"/"+strconv.Itoa(i))
	}
}

func (w *walker) plainRef(v any, p string) {
	if o, ok := v.(*object); ok {
		w.ref(o, p, false, "")
	}
}

func (w *walker) pathItem(v any, p string) {
	o, ok := v.(*object)
	if !ok {
		return
	}
	w.ref(o, p, false, "")
	w.listOf(o.arr("parameters"), p+"/parameters", w.parameter)
	for _, m := range httpMethods {
		if op := o.obj(m); op != nil {
			w.operation(op, p+"/"+m)
		}
	}
}

func (w *walker) operation(o *object, p string) {
	w.listOf(o.arr("parameters"), p+"/parameters", w.parameter)
	if rb, ok := o.get("requestBody"); ok {
		w.requestBody(rb, p+"/requestBody")
	}
	w.mapOf(o.obj("responses"), p+"/responses", w.response)
	w.mapOf(o.obj("callbacks"), p+"/callbacks", w.callback)
}

func (w *walker) parameter(v any, p string) {
	o, ok := v.(*object)
	if !ok || w.ref(o, p, false, "") {
		return
	}
	if s, ok := o.get("schema"); ok {
		w.schema(s, p+"/schema", documentBase)
	}
	w.mapOf(o.obj("content"), p+"/content", w.mediaType)
	w.mapOf(o.obj("examples"), p+"/examples", w.example)
}

func (w *walker) requestBody(v any, p string) {
	o, ok := v.(*object)
	if !ok || w.ref(o, p, false, "") {
		return
	}
	w.mapOf(o.obj("content"), p+"/content", w.mediaType)
}

func (w *walker) mediaType(v any, p string) {
	o, ok := v.(*object)
	if !ok {
		return
	}
	if s, ok := o.get("schema"); ok {
		w.schema(s, p+"/schema", documentBase)
	}
	w.mapOf(o.obj("examples"), p+"/examples", w.example)
	w.mapOf(o.obj("encoding"), p+"/encoding", func(v any, p string) {
		if e, ok := v.(*object); ok {
			w.mapOf(e.obj("headers"), p+"/headers", w.parameter)
		}
	})
}

func (w *walker) response(v any, p string) {
	o, ok := v.(*object)
	if !ok || w.ref(o, p, false, "") {
		return
	}
	w.mapOf(o.obj("headers"), p+"/headers", w.parameter)
	w.mapOf(o.obj("content"), p+"/content", w.mediaType)
	w.mapOf(o.obj("links"), p+"/links", w.plainRef)
}

func (w *walker) example(v any, p string) { w.plainRef(v, p) }

func (w *walker) callback(v any, p string) {
	o, ok := v.(*object)
	if !ok || w.ref(o, p, false, "") {
		return
	}
	w.mapOf(o, p, w.pathItem)
}

// Schema keywords by the shape of their value.
var (
	schemaKeywords     = []string{"not", "if", "then", "else", "items", "contains", "additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema", "additionalItems"}
	schemaListKeywords = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	schemaMapKeywords  = []string{"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"}
	// valueKeywords hold data or plain values, never schemas.
	valueKeywords = []string{"$ref", "$id", "$anchor", "$schema", "$vocabulary", "$comment", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
		"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
		"maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
		"maxProperties", "minProperties", "required", "dependentRequired", "title", "description", "default",
		"deprecated", "readOnly", "writeOnly", "examples", "example", "format", "contentEncoding", "contentMediaType",
		"nullable", "discriminator", "xml", "externalDocs", "dependencies"}
)

func (w *walker) schema(v any, p, base string) {
	o, ok := v.(*object)
	if !ok {
		return // a boolean schema, or invalid (the library reports it)
	}
	w.ix.schemas[p] = true
	if w.ix.v31 {
		if id := o.str("$id"); id != "" {
			if u, err := resolveURI(base, id); err == nil {
				u.Fragment = ""
				base = u.String()
				if _, dup := w.ix.ids[base]; !dup {
					w.ix.ids[base] = p
				}
			}
		}
		if a := o.str("$anchor"); a != "" {
			w.ix.anchors[base+"#"+a] = p
		}
	}
	w.ref(o, p, true, base)
	for _, k := range o.keys {
		val := o.vals[k]
		w.ix.keywords[k] = true
		switch {
		case strings.HasPrefix(k, "x-"):
		case slices.Contains(schemaKeywords, k):
			if a, isList := val.([]any); isList && k == "items" {
				w.listOf(a, p+"/items", func(v any, p string) { w.schema(v, p, base) })
				continue
			}
			w.schema(val, p+"/"+escapeToken(k), base)
		case slices.Contains(schemaListKeywords, k):
			a, _ := val.([]any)
			w.listOf(a, p+"/"+k, func(v any, p string) { w.schema(v, p, base) })
		case slices.Contains(schemaMapKeywords, k):
			m, _ := val.(*object)
			if m == nil {
				continue
			}
			for _, name := range m.keys {
				w.schema(m.vals[name], p+"/"+escapeToken(k)+"/"+escapeToken(name), base)
			}
		case slices.Contains(valueKeywords, k):
		default:
			w.ix.unknown[k] = true
		}
	}
}

// resolveURI resolves ref against base.
func resolveURI(base, ref string) (*url.URL, error) {
	b, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	r, err := url.Parse(ref)
	if err != nil {
		return nil, err
	}
	return b.ResolveReference(r), nil
}

// fragmentPointer turns a URI fragment ("/components/schemas/Pet",
// percent-encoded or not) into a JSON pointer.
func fragmentPointer(frag string) (string, bool) {
	p, err := url.PathUnescape(frag)
	if err != nil {
		return "", false
	}
	return p, p == "" || strings.HasPrefix(p, "/")
}

// resolveRefs resolves every $ref to a pointer into the document and
// rewrites it to the local form "#<pointer>", so that the library, which
// resolves only "#/…" within a document, sees the same targets: a
// schema $ref of OpenAPI 3.1 may name a schema by its $id, or an $anchor
// in it. A $ref that points outside the document (another file, a URL,
// an $id nobody declares) is refused, as is one that points nowhere.
// "#…" references are always relative to the document, as every OpenAPI
// tool reads them, even under a schema with its own $id.
func (ix *index) resolveRefs(errs *errorList) {
	for _, r := range ix.refs {
		site := r.ptr + "/$ref"
		if r.ref == "\x00" {
			errs.add("", site, "$ref must be a string")
			continue
		}
		if strings.HasPrefix(r.ref, "#") {
			p, ok := fragmentPointer(r.ref[1:])
			if !ok {
				errs.add("", site, "$ref %q is not a JSON pointer fragment (want \"#/…\")", r.ref)
				continue
			}
			if _, found := lookup(ix.root, p); !found {
				errs.add("", site, "$ref %q points to nothing in the document", r.ref)
				continue
			}
			r.target = p
			continue
		}
		if target, ok := ix.resolveID(r); ok {
			r.target = target
			continue
		}
		errs.add("", site, "$ref %q refers outside this document; an import reads one self-contained document (bundle external files into it first, e.g. with `redocly bundle`)", r.ref)
	}
	if len(errs.errs) > 0 {
		return
	}
	for _, r := range ix.refs {
		o, _ := lookup(ix.root, r.ptr)
		o.(*object).set("$ref", "#"+r.target)
	}
}

// resolveID resolves a schema $ref of OpenAPI 3.1 by $id and $anchor.
func (ix *index) resolveID(r *refSite) (string, bool) {
	if !ix.v31 || !r.schema {
		return "", false
	}
	u, err := resolveURI(r.base, r.ref)
	if err != nil {
		return "", false
	}
	frag := u.Fragment
	u.Fragment, u.RawFragment = "", ""
	res, ok := ix.ids[u.String()]
	if !ok {
		return "", false
	}
	if frag == "" {
		return res, true
	}
	if strings.HasPrefix(frag, "/") {
		p := res + frag
		_, found := lookup(ix.root, p)
		return p, found
	}
	p, ok := ix.anchors[u.String()+"#"+frag]
	return p, ok
}

// target returns the resolved target of the $ref held by the object at
// ptr, or "".
func (ix *index) target(ptr string) string {
	i := sort.Search(len(ix.refs), func(i int) bool { return ix.refs[i].ptr >= ptr })
	if i < len(ix.refs) && ix.refs[i].ptr == ptr {
		return ix.refs[i].target
	}
	return ""
}

// sortRefs orders the $ref sites by pointer for target and usedBy.
func (ix *index) sortRefs() {
	sort.SliceStable(ix.refs, func(i, j int) bool { return ix.refs[i].ptr < ix.refs[j].ptr })
}

// follow returns the pointer of the object ptr finally stands for: while
// the object there is a Reference, its target. A chain that comes back to
// itself is an error naming the chain.
func (ix *index) follow(ptr string) (string, error) {
	seen := []string{ptr}
	for {
		t := ix.target(ptr)
		if t == "" {
			return ptr, nil
		}
		if slices.Contains(seen, t) {
			return "", fmt.Errorf("the $ref chain %s never reaches a value", strings.Join(append(seen, t), " → "))
		}
		seen = append(seen, t)
		ptr = t
	}
}

// checkRefChains refuses Reference Objects whose chain of $refs never
// reaches a value, and schemas that evaluate themselves on the same
// instance ($ref, allOf, anyOf, oneOf, not, if/then/else and
// dependentSchemas lead back to the schema without descending into a
// property or item): validating against one would never end. A schema
// that recurses through properties or items (a tree) is fine.
func (ix *index) checkRefChains(errs *errorList) {
	reported := map[string]bool{}
	for _, r := range ix.refs {
		if _, err := ix.follow(r.ptr); err != nil && !reported[r.ptr] {
			errs.add("", r.ptr+"/$ref", "%v", err)
			chain, _ := chainMembers(ix, r.ptr)
			for _, p := range chain {
				reported[p] = true
			}
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(p string) bool
	visit = func(p string) bool {
		switch color[p] {
		case grey:
			i := slices.Index(stack, p)
			cycle := append(slices.Clone(stack[i:]), p)
			errs.add("", p, "schema cycle %s: each schema applies the next to the same value, so validation would never end (a schema may recur only through properties or items)", strings.Join(cycle, " → "))
			return false
		case black:
			return true
		}
		color[p] = grey
		stack = append(stack, p)
		defer func() { stack = stack[:len(stack)-1]; color[p] = black }()
		for _, next := range ix.inPlace(p) {
			if !visit(next) {
				return false
			}
		}
		return true
	}
	ptrs := make([]string, 0, len(ix.schemas))
	for p := range ix.schemas {
		ptrs = append(ptrs, p)
	}
	sort.Strings(ptrs)
	for _, p := range ptrs {
		if color[p] == white && !visit(p) {
			return
		}
	}
}

func chainMembers(ix *index, ptr string) ([]string, bool) {
	var out []string
	for range 1000 {
		out = append(out, ptr)
		ptr = ix.target(ptr)
		if ptr == "" || slices.Contains(out, ptr) {
			return out, ptr == ""
		}
	}
	return out, false
}

// inPlace returns the schemas the schema at p applies to the same
// instance.
func (ix *index) inPlace(p string) []string {
	v, _ := lookup(ix.root, p)
	o, ok := v.(*object)
	if !ok {
		return nil
	}
	var out []string
	if t := ix.target(p); t != "" {
		out = append(out, t)
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		for i := range o.arr(k) {
			out = append(out, p+"/"+k+"/"+strconv.Itoa(i))
		}
	}
	for _, k := range []string{"not", "if", "then", "else"} {
		if _, ok := o.get(k); ok {
			out = append(out, p+"/"+k)
		}
	}
	if ds := o.obj("dependentSchemas"); ds != nil {
		for _, k := range ds.keys {
			out = append(out, p+"/dependentSchemas/"+escapeToken(k))
		}
	}
	return slices.DeleteFunc(out, func(q string) bool { return !ix.schemas[q] })
}

// reaches reports whether the subtree at from, with everything its $refs
// lead to, contains the node at ptr.
func (ix *index) reaches(from, ptr string) bool {
	within := func(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	seen := map[string]bool{}
	queue := []string{from}
	for len(queue) > 0 {
		root := queue[0]
		queue = queue[1:]
		if seen[root] {
			continue
		}
		seen[root] = true
		if within(ptr, root) {
			return true
		}
		i := sort.Search(len(ix.refs), func(i int) bool { return ix.refs[i].ptr >= root })
		for ; i < len(ix.refs) && within(ix.refs[i].ptr, root); i++ {
			if t := ix.refs[i].target; t != "" && !seen[t] {
				queue = append(queue, t)
			}
		}
	}
	return false
}
