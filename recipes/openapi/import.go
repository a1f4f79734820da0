package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// Result is what an import produced: one endpoint document per imported
// operation, and the operations it skipped with the reason.
type Result struct {
	// Source is Options.Source.
	Source string
	// Version is the document's openapi field ("3.0.4", "3.1.0").
	Version string
	// SHA256 is the lowercase hex SHA-256 of the document's bytes.
	SHA256 string
	// Endpoints are the generated endpoint documents, in document order.
	Endpoints []*Endpoint
	// Skipped are the selected operations no endpoint can serve
	// faithfully, in document order, each with the reason.
	Skipped []*Skipped
	// NotSelected counts the operations Options.Tags, OperationIDs and
	// Paths left out.
	NotSelected int
	// Env lists, sorted, the environment variables the generated
	// headers read (${NAME}): the gateway's configuration fails to load
	// until each is set.
	Env []string
	// Servers are the document's server URLs: an upstream's base URL
	// carries their path prefix (the endpoints' upstream paths are the
	// document's paths, relative to it).
	Servers []string
}

// Endpoint is one generated endpoint document.
type Endpoint struct {
	// Operation names the operation: "getPetById (GET /pet/{petId})".
	Operation string
	// OperationID is the operation's operationId, "" when it has none.
	OperationID string
	// HTTPMethod and HTTPPath are the upstream call (the document's).
	HTTPMethod, HTTPPath string
	// Method and Path are the AGTP pair the endpoint serves.
	Method, Path string
	// Proposed is true when Path renames a segment of HTTPPath that
	// equals a method name (RCNS §6); Accepted tells whether the rename
	// was accepted (Options.AcceptRenames or an Override). An endpoint
	// with a rename not accepted is refused (Import returns an error).
	Proposed, Accepted bool
	// File is the document's file name in the output folder.
	File string
	// Notes are the review notes written at the top of the document.
	Notes []string
	// Data is the document, YAML.
	Data []byte

	// check is Data without external_service.headers, whose ${NAME}
	// placeholders recipes.BuildEndpoint would resolve from the
	// environment of the import rather than the gateway's.
	check []byte
}

// Skipped is one selected operation the import did not turn into an
// endpoint.
type Skipped struct {
	// Operation, OperationID, HTTPMethod and HTTPPath are as in Endpoint.
	Operation, OperationID, HTTPMethod, HTTPPath string
	// Pointer is the JSON pointer of what made it unimportable.
	Pointer string
	// Reason says why, and what would make it importable.
	Reason string
}

// operation is one Operation Object of the document.
type operation struct {
	ptr     string // the Operation Object (inside the followed Path Item)
	itemPtr string // the Path Item, after its $ref
	path    string // the path template as the document writes it
	method  string // upper-case HTTP method
	id      string // operationId, or ""
	raw     *object
	kop     *openapi3.Operation
	kitem   *openapi3.PathItem
}

// key is the operation's key in Options.Overrides.
func (o *operation) key() string {
	if o.id != "" {
		return o.id
	}
	return o.method + " " + o.path
}

// name is how messages name the operation.
func (o *operation) name() string {
	if o.id != "" {
		return fmt.Sprintf("%s (%s %s)", o.id, o.method, o.path)
	}
	return o.method + " " + o.path
}

// importer holds the state of one Import.
type importer struct {
	opts  Options
	mp    *policy.MethodPolicy
	ix    *index
	v30   bool
	root  *object
	kdoc  *openapi3.T
	errs  *errorList
	env   map[string]bool
	files map[string]*operation // lower-cased file name → operation
}

// Import turns the OpenAPI 3.0 or 3.1 document spec (YAML or JSON, at
// most MaxDocumentBytes) into endpoint documents, one per selected
// operation (docs/recipes.md, "Starting from OpenAPI"). It reads no
// file and no network: every $ref must point into spec.
//
// The same spec and options always give the same Result, byte for byte.
//
// Errors are Errors, each naming the operation (when there is one) and
// the JSON pointer: invalid options; a document that is too large, not
// YAML or JSON, not OpenAPI 3.0 or 3.1, or invalid; an external,
// dangling or cyclic $ref; duplicate operationIds; an operation whose
// mapping breaks the method catalog or the path grammar (RCNS §5, §6),
// including a proposed rename not accepted; two operations that would
// serve the same AGTP route or write the same file. When the document
// could be read, the Result is returned with the error, so that a dry
// run can still show what the import would do.
func Import(spec []byte, opts Options) (*Result, error) {
	errs := &errorList{file: opts.Source}
	mp := &policy.MethodPolicy{Catalog: policy.DefaultCatalog()}
	checkOptions(&opts, mp, errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	if len(spec) > MaxDocumentBytes {
		return nil, tooLarge(opts.Source, MaxDocumentBytes)
	}
	v, err := parseDocument(opts.Source, spec)
	if err != nil {
		return nil, Errors{err.(*Error)}
	}
	root, ok := v.(*object)
	if !ok {
		return nil, Errors{{File: opts.Source, Message: "not an OpenAPI document: the top level must be a mapping"}}
	}
	version := root.str("openapi")
	switch {
	case root.has("swagger"):
		return nil, Errors{{File: opts.Source, Pointer: "/swagger", Message: "this is a Swagger 2.0 document; convert it to OpenAPI 3 first (e.g. with swagger2openapi)"}}
	case strings.HasPrefix(version, "3.0."), strings.HasPrefix(version, "3.1."):
	case version == "":
		return nil, Errors{{File: opts.Source, Pointer: "/openapi", Message: "not an OpenAPI document: no openapi version field"}}
	default:
		return nil, Errors{{File: opts.Source, Pointer: "/openapi", Message: fmt.Sprintf("OpenAPI %s is not supported; the import reads OpenAPI 3.0 and 3.1", version)}}
	}
	im := &importer{opts: opts, mp: mp, v30: strings.HasPrefix(version, "3.0."), root: root, errs: errs,
		env: map[string]bool{}, files: map[string]*operation{}}
	im.ix = buildIndex(root, !im.v30)
	im.ix.resolveRefs(errs)
	im.ix.sortRefs()
	if len(errs.errs) == 0 {
		im.ix.checkRefChains(errs)
	}
	ops := im.listOperations()
	if len(errs.errs) > 0 {
		im.nameOperations(ops)
		return nil, errs.err()
	}
	im.checkOperationIDs(ops)
	im.checkOverrideKeys(ops)
	if len(errs.errs) > 0 {
		return nil, errs.err()
	}
	if err := im.load(ops); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(spec)
	res := &Result{Source: opts.Source, Version: version, SHA256: hex.EncodeToString(sum[:])}
	if servers := root.arr("servers"); servers != nil {
		for _, s := range servers {
			if so, ok := s.(*object); ok && so.str("url") != "" {
				res.Servers = append(res.Servers, so.str("url"))
			}
		}
	}
	for _, op := range ops {
		if !im.selected(op) {
			res.NotSelected++
			continue
		}
		ep, sk := im.operation(op)
		if sk != nil {
			res.Skipped = append(res.Skipped, sk)
		}
		if ep != nil {
			res.Endpoints = append(res.Endpoints, ep)
		}
	}
	im.checkEndpoints(res.Endpoints, ops)
	res.Env = sortedKeys(im.env)
	return res, errs.err()
}

// listOperations lists the Operation Objects under /paths in document
// order (paths as written, methods in the order of httpMethods).
func (im *importer) listOperations() []*operation {
	var ops []*operation
	paths := im.root.obj("paths")
	if paths == nil {
		return nil
	}
	for _, p := range paths.keys {
		if strings.HasPrefix(p, "x-") {
			continue
		}
		itemPtr, err := im.ix.follow("/paths/" + escapeToken(p))
		if err != nil {
			continue // reported by checkRefChains
		}
		v, _ := lookup(im.root, itemPtr)
		item, _ := v.(*object)
		for _, m := range httpMethods {
			raw := item.obj(m)
			if raw == nil {
				continue
			}
			ops = append(ops, &operation{ptr: itemPtr + "/" + m, itemPtr: itemPtr, path: p,
				method: strings.ToUpper(m), id: raw.str("operationId"), raw: raw})
		}
	}
	return ops
}

// nameOperations fills in the operations that use the node of each
// error that has none.
func (im *importer) nameOperations(ops []*operation) {
	for _, e := range im.errs.errs {
		if e.Operation != "" || !(strings.HasPrefix(e.Pointer, "/paths/") || strings.HasPrefix(e.Pointer, "/components/") || strings.HasPrefix(e.Pointer, "/webhooks/")) {
			continue // a document-wide problem, or the operation is named
		}
		var names []string
		for _, op := range ops {
			if im.ix.reaches(op.ptr, e.Pointer) || im.ix.reaches(op.itemPtr+"/parameters", e.Pointer) {
				names = append(names, op.name())
			}
		}
		switch {
		case len(names) == 0:
			e.Message += " (no operation uses it)"
		case len(names) > 5:
			e.Operation = strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
		default:
			e.Operation = strings.Join(names, ", ")
		}
	}
}

func (im *importer) checkOperationIDs(ops []*operation) {
	first := map[string]*operation{}
	for _, op := range ops {
		if op.id == "" {
			continue
		}
		if prev, dup := first[op.id]; dup {
			im.errs.add(op.name(), op.ptr+"/operationId", "operationId %q is also the operationId of %s %s (at %s); operationIds must be unique", op.id, prev.method, prev.path, prev.ptr)
			continue
		}
		first[op.id] = op
	}
}

// checkOverrideKeys refuses map-file entries that name no operation.
func (im *importer) checkOverrideKeys(ops []*operation) {
	keys := map[string]bool{}
	for _, op := range ops {
		keys[op.key()] = true
	}
	for _, k := range sortedKeys(im.opts.Overrides) {
		if !keys[k] {
			im.errs.add("", "", "map entry %q names no operation of the document (give an operationId, or \"METHOD /path\" for an operation without one)", k)
		}
	}
}

// load reads the document with kin-openapi and validates it, with the
// $refs already rewritten to local pointers. Examples and defaults are
// not checked against their schemas (they are annotations the gateway
// does not act on); patterns are not compiled (OpenAPI's are ECMA-262
// regular expressions, which Go's RE2 cannot always read: the
// translation drops and reports those); and schema keywords the library
// does not know are let through so that the translation reports each.
func (im *importer) load(ops []*operation) error {
	var buf bytes.Buffer
	writeJSON(&buf, im.root)
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(buf.Bytes())
	if err != nil {
		return Errors{{File: im.opts.Source, Message: "invalid OpenAPI: " + err.Error()}}
	}
	vopts := []openapi3.ValidationOption{
		openapi3.EnableMultiError(),
		openapi3.DisableExamplesValidation(),
		openapi3.DisableSchemaDefaultsValidation(),
		openapi3.DisableSchemaPatternValidation(),
	}
	let := sortedKeys(im.ix.unknown)
	for _, k := range unmodelled {
		if im.ix.keywords[k] {
			let = append(let, k)
		}
	}
	if len(let) > 0 {
		vopts = append(vopts, openapi3.AllowExtraSiblingFields(let...))
	}
	if err := doc.Validate(context.Background(), vopts...); err != nil {
		for _, e := range flatten(err) {
			ptr, opName := im.kinLocation(e, ops)
			im.errs.add(opName, ptr, "invalid OpenAPI: %v", e)
		}
		if len(im.errs.errs) > 0 {
			im.nameOperations(ops)
			return im.errs.err()
		}
	}
	im.kdoc = doc
	for _, op := range ops {
		if item := doc.Paths.Value(op.path); item != nil {
			op.kitem = item
			op.kop = item.GetOperation(op.method)
		}
	}
	return nil
}

// unmodelled are JSON Schema keywords kin-openapi's Schema does not
// model and would refuse as unknown fields; the translation carries or
// reports each.
var unmodelled = []string{"$vocabulary", "$recursiveRef", "$recursiveAnchor", "dependencies", "additionalItems", "definitions"}

// flatten lists the errors of a kin-openapi MultiError, recursively.
func flatten(err error) []error {
	var me openapi3.MultiError
	if errors.As(err, &me) {
		var out []error
		for _, e := range me {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// componentSections maps kin-openapi's component section labels to the
// member of components they name.
var componentSections = map[string]string{
	"schema": "schemas", "parameter": "parameters", "header": "headers", "request body": "requestBodies",
	"response": "responses", "security scheme": "securitySchemes", "example": "examples", "link": "links", "callback": "callbacks",
}

// kinLocation turns the context of a kin-openapi validation error into
// a JSON pointer and, for an error inside an operation, its name.
func (im *importer) kinLocation(err error, ops []*operation) (ptr, opName string) {
	var sec *openapi3.SectionValidationError
	var pve *openapi3.PathValidationError
	var ove *openapi3.OperationValidationError
	var cve *openapi3.ComponentValidationError
	if errors.As(err, &sec) {
		ptr = "/" + sec.Section
	}
	if errors.As(err, &cve) {
		ptr = "/components"
		if s, ok := componentSections[cve.Section]; ok {
			ptr += "/" + s + "/" + escapeToken(cve.Name)
		}
	}
	if errors.As(err, &pve) {
		ptr = "/paths/" + escapeToken(pve.Path)
		if errors.As(err, &ove) {
			ptr += "/" + strings.ToLower(ove.Method)
			for _, op := range ops {
				if op.path == pve.Path && op.method == strings.ToUpper(ove.Method) {
					opName = op.name()
				}
			}
		}
	}
	return ptr, opName
}

// selected applies Options.Tags, OperationIDs and Paths.
func (im *importer) selected(op *operation) bool {
	o := im.opts
	var tags []string
	if op.kop != nil {
		tags = op.kop.Tags
	}
	if len(o.Tags) > 0 && !slices.ContainsFunc(tags, func(t string) bool { return slices.Contains(o.Tags, t) }) {
		return false
	}
	if len(o.OperationIDs) > 0 && !slices.Contains(o.OperationIDs, op.id) {
		return false
	}
	if len(o.Paths) > 0 && !slices.ContainsFunc(o.Paths, func(g string) bool { ok, _ := path.Match(g, op.path); return ok }) {
		return false
	}
	return true
}

// checkEndpoints runs every generated document through the same checks
// as a hand-written one (the endpoint schema, then recipes.BuildEndpoint
// with the upstream) and refuses two endpoints on one AGTP route.
func (im *importer) checkEndpoints(eps []*Endpoint, ops []*operation) {
	up, err := recipes.NewUpstream(im.opts.Upstream, "http://127.0.0.1", recipes.UpstreamOptions{})
	if err != nil {
		im.errs.add("", "", "%v", err)
		return
	}
	upstreams := map[string]*recipes.Upstream{im.opts.Upstream: up}
	routes := &policy.RouteTable[*Endpoint]{}
	opByName := map[string]*operation{}
	for _, op := range ops {
		opByName[op.name()] = op
	}
	for _, e := range eps {
		if e.Proposed && !e.Accepted {
			continue // refused already
		}
		ptr := opByName[e.Operation].ptr
		doc, err := schema.Parse(e.File, e.check, schema.KindEndpoint)
		if err != nil {
			im.errs.add(e.Operation, ptr, "the generated document fails the endpoint schema (a bug of the import; please report it): %v", err)
			continue
		}
		built, err := recipes.BuildEndpoint(doc, im.mp, upstreams)
		if err != nil {
			im.errs.add(e.Operation, ptr, "the generated endpoint does not load: %v", err)
			continue
		}
		if err := routes.Add(built.Method, built.Template, e); err != nil {
			im.errs.add(e.Operation, ptr, "AGTP %s %s: %v; give one of them another AGTP path in a map file", e.Method, e.Path, err)
		}
	}
}

// snakeStatus is the error name of an HTTP status: its reason phrase in
// snake case ("404" → "not_found").
func snakeStatus(code int) string {
	t := http.StatusText(code)
	if t == "" {
		return fmt.Sprintf("status_%d", code)
	}
	t = strings.ToLower(t)
	var b strings.Builder
	for _, r := range t {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
				b.WriteByte('_')
			}
		}
	}
	return strings.TrimSuffix(b.String(), "_")
}

// sortedStatus returns the response codes in numeric order, ranges
// ("2XX") after the codes they cover.
func sortedStatus(codes []string) []string {
	out := slices.Clone(codes)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := strings.ToUpper(out[i]), strings.ToUpper(out[j])
		return strings.ReplaceAll(a, "X", "~") < strings.ReplaceAll(b, "X", "~")
	})
	return out
}
