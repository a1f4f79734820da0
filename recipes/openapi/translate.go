package openapi

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// direction tells which way a schema's values travel, for readOnly and
// writeOnly (OpenAPI 3.0 §4.7.24, 3.1 §4.8.24): a readOnly property is
// not sent in a request, a writeOnly one not returned in a response.
type direction int

const (
	toUpstream   direction = iota // request parameters and bodies
	fromUpstream                  // responses
)

// notes are the review notes of one endpoint: what the translation could
// not carry over faithfully, each with the JSON pointer it comes from.
type notes struct{ list []string }

func (n *notes) add(ptr, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if ptr != "" {
		msg = ptr + ": " + msg
	}
	if !slices.Contains(n.list, msg) {
		n.list = append(n.list, msg)
	}
}

// translator turns OpenAPI Schema Objects into one JSON Schema 2020-12
// document (an endpoint's input_schema or output_schema).
//
// A component a schema uses once is written in place; one used twice or
// more, or one that recurs (a tree), becomes a member of the document's
// $defs with a "$ref": "#/$defs/NAME" at each use. Every component's
// body is so written at most once, and a recursive schema needs no
// unbounded expansion.
type translator struct {
	ix    *index
	v30   bool
	dir   direction
	notes *notes

	uses      map[string]int  // component pointer → number of $refs to it
	recursive map[string]bool // components reached again while in themselves
	scanned   map[string]bool
	defNames  map[string]string // component pointer → $defs name
	defOrder  []string          // component pointers, in the order first met
	taken     map[string]bool   // $defs names in use
	defs      map[string]any    // $defs name → translated schema
	emitting  map[string]bool
}

func newTranslator(ix *index, v30 bool, dir direction, n *notes) *translator {
	return &translator{ix: ix, v30: v30, dir: dir, notes: n,
		uses: map[string]int{}, recursive: map[string]bool{}, scanned: map[string]bool{},
		defNames: map[string]string{}, taken: map[string]bool{}, defs: map[string]any{}, emitting: map[string]bool{}}
}

// scan counts the $refs of the schema at p and everything it reaches.
// Call it for every root before emitting any.
func (t *translator) scan(p string, stack []string) {
	v, _ := lookup(t.ix.root, p)
	o, ok := v.(*object)
	if !ok {
		return
	}
	if o.has("$ref") {
		if target := t.ix.target(p); target != "" {
			t.uses[target]++
			if slices.Contains(stack, target) {
				t.recursive[target] = true
			} else if !t.scanned[target] {
				t.scanned[target] = true
				t.scan(target, append(stack, target))
			}
		}
		if t.v30 {
			return // OpenAPI 3.0: the siblings of $ref are ignored
		}
	}
	for _, child := range t.children(o, p) {
		t.scan(child, stack)
	}
}

// children lists the pointers of the subschemas of o (at p).
func (t *translator) children(o *object, p string) []string {
	var out []string
	for _, k := range o.keys {
		v := o.vals[k]
		switch {
		case slices.Contains(schemaKeywords, k):
			if a, ok := v.([]any); ok {
				for i := range a {
					out = append(out, p+"/"+k+"/"+strconv.Itoa(i))
				}
				continue
			}
			out = append(out, p+"/"+k)
		case slices.Contains(schemaListKeywords, k):
			a, _ := v.([]any)
			for i := range a {
				out = append(out, p+"/"+k+"/"+strconv.Itoa(i))
			}
		case k == "properties" || k == "patternProperties" || k == "dependentSchemas":
			if m, ok := v.(*object); ok {
				for _, name := range m.keys {
					out = append(out, p+"/"+k+"/"+escapeToken(name))
				}
			}
		}
	}
	return out
}

// isDef reports whether the component at target becomes a $defs member.
func (t *translator) isDef(target string) bool {
	return t.uses[target] >= 2 || t.recursive[target]
}

// defName returns the $defs name of the component at target, choosing
// it on first use: the component's name (the pointer's last tokens after
// /components/schemas/), reduced to letters, digits, '.', '_' and '-',
// with a numeric suffix when taken.
func (t *translator) defName(target string) string {
	if n, ok := t.defNames[target]; ok {
		return n
	}
	rest := strings.TrimPrefix(target, "/components/schemas/")
	var toks []string
	for _, tok := range strings.Split(strings.TrimPrefix(rest, "/"), "/") {
		toks = append(toks, unescapeToken(tok))
	}
	base := defNameChars.ReplaceAllString(strings.Join(toks, "."), "_")
	if base == "" {
		base = "schema"
	}
	name := base
	for i := 2; t.taken[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
	}
	t.taken[name] = true
	t.defNames[target] = name
	t.defOrder = append(t.defOrder, target)
	return name
}

var defNameChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// refTo returns what stands for the component at target: a $ref to its
// $defs member, or its translation in place.
func (t *translator) refTo(target string) any {
	if t.isDef(target) {
		name := t.defName(target)
		if _, done := t.defs[name]; !done && !t.emitting[target] {
			t.emitting[target] = true
			t.defs[name] = t.emit(target)
		}
		o := newObject()
		o.set("$ref", "#/$defs/"+name)
		return o
	}
	return t.emit(target)
}

// withDefs puts the collected $defs into root (an object), in the order
// the components were first met.
func (t *translator) withDefs(root any) any {
	if len(t.defOrder) == 0 {
		return root
	}
	o, ok := root.(*object)
	if !ok { // a boolean root with definitions: wrap it
		o = newObject()
		o.set("allOf", []any{root})
	}
	defs := newObject()
	for _, target := range t.defOrder {
		name := t.defNames[target]
		defs.set(name, t.defs[name])
	}
	o.set("$defs", defs)
	return o
}

// Keywords the translation drops on purpose (docs/recipes.md, "Starting
// from OpenAPI"): OpenAPI annotations with no meaning for JSON values,
// and the identifiers and definitions the import has already resolved.
var droppedKeywords = []string{"xml", "externalDocs", "$id", "$anchor", "$schema", "$vocabulary", "$defs", "definitions"}

// untranslatable are keywords whose meaning the translation cannot
// carry; each use is a review note.
var untranslatable = map[string]string{
	"$dynamicRef":      "dynamic references are not translated",
	"$dynamicAnchor":   "dynamic anchors are not translated",
	"$recursiveRef":    "$recursiveRef (JSON Schema 2019-09) is not translated",
	"$recursiveAnchor": "$recursiveAnchor (JSON Schema 2019-09) is not translated",
	"dependencies":     "dependencies (JSON Schema draft 7) is not translated; use dependentRequired or dependentSchemas",
	"additionalItems":  "additionalItems (JSON Schema draft 2019-09) is not translated; use prefixItems and items",
}

// emit translates the schema at p.
func (t *translator) emit(p string) any {
	v, _ := lookup(t.ix.root, p)
	switch x := v.(type) {
	case bool:
		return x
	case *object:
		return t.emitObject(x, p)
	}
	t.notes.add(p, "a schema must be an object or a boolean; accepted anything instead")
	return true
}

func (t *translator) emitObject(o *object, p string) any {
	if o.has("$ref") {
		target := t.ix.target(p)
		if target == "" { // not a schema the index walked: never expected
			t.notes.add(p, "$ref not resolved; accepted anything instead")
			return true
		}
		if t.v30 || onlyRef(o) {
			return t.refTo(target)
		}
		// OpenAPI 3.1: $ref applies next to its siblings.
		rest := clone(o).(*object)
		rest.del("$ref")
		out := t.emitKeywords(rest, p)
		ref := t.refTo(target)
		if ro, ok := ref.(*object); ok && !ro.has("$ref") && onlyAnnotations(out) {
			// Annotations next to $ref annotate the referenced schema: set
			// them on its copy in place (they decide no validation).
			for _, k := range out.(*object).keys {
				ro.set(k, out.(*object).vals[k])
			}
			return ro
		}
		if ro, ok := ref.(*object); ok && ro.len() == 1 && ro.has("$ref") {
			if m, ok := out.(*object); ok && !m.has("$ref") {
				merged := newObject()
				merged.set("$ref", ro.vals["$ref"])
				for _, k := range m.keys {
					merged.set(k, m.vals[k])
				}
				return merged
			}
		}
		m, ok := out.(*object)
		if !ok {
			return ref
		}
		all := []any{ref}
		all = append(all, m.arr("allOf")...)
		m.set("allOf", all)
		return m
	}
	return t.emitKeywords(o, p)
}

// annotationKeywords decide nothing about which values are valid.
var annotationKeywords = []string{"title", "description", "readOnly", "writeOnly", "deprecated", "examples", "default", "$comment"}

// onlyAnnotations reports whether the translated schema v holds
// annotation keywords only.
func onlyAnnotations(v any) bool {
	o, ok := v.(*object)
	if !ok {
		return false
	}
	for _, k := range o.keys {
		if !slices.Contains(annotationKeywords, k) {
			return false
		}
	}
	return true
}

// onlyRef reports whether o holds nothing but $ref and keywords the
// translation drops.
func onlyRef(o *object) bool {
	for _, k := range o.keys {
		if k != "$ref" && !strings.HasPrefix(k, "x-") && !slices.Contains(droppedKeywords, k) {
			return false
		}
	}
	return true
}

func (t *translator) emitKeywords(o *object, p string) any {
	out := newObject()
	var nullable, exclMin, exclMax bool
	var minimum, maximum any
	var removed []string // properties left out for readOnly / writeOnly
	for _, k := range o.keys {
		v := o.vals[k]
		kp := p + "/" + escapeToken(k)
		switch {
		case strings.HasPrefix(k, "x-"), slices.Contains(droppedKeywords, k):
		case untranslatable[k] != "":
			t.notes.add(kp, "%s: the schema is checked without it", untranslatable[k])
		case k == "nullable":
			if !t.v30 {
				t.notes.add(kp, `nullable is an OpenAPI 3.0 keyword, ignored in 3.1 (write type: [..., "null"]); not translated`)
				continue
			}
			nullable, _ = v.(bool)
		case k == "discriminator":
			// translated after oneOf/anyOf below
		case k == "example":
			if !o.has("examples") {
				out.set("examples", []any{v})
			}
		case k == "minimum":
			minimum = v
		case k == "maximum":
			maximum = v
		case k == "exclusiveMinimum" || k == "exclusiveMaximum":
			if b, ok := v.(bool); ok { // OpenAPI 3.0: a flag on minimum/maximum
				if k == "exclusiveMinimum" {
					exclMin = b
				} else {
					exclMax = b
				}
				if b && !o.has(strings.ToLower(strings.TrimPrefix(k, "exclusive"))) {
					t.notes.add(kp, "%s: true without %s has no effect; dropped", k, strings.ToLower(strings.TrimPrefix(k, "exclusive")))
				}
				continue
			}
			out.set(k, v)
		case k == "pattern":
			s, _ := v.(string)
			if _, err := regexp.Compile(s); err != nil {
				t.notes.add(kp, "pattern %q is not an RE2 regular expression (the gateway's schema engine); not translated", s)
				continue
			}
			out.set(k, v)
		case k == "properties":
			m, _ := v.(*object)
			props := newObject()
			for _, name := range m.keys {
				pp := kp + "/" + escapeToken(name)
				if t.dir == toUpstream && t.flag(pp, "readOnly") {
					t.notes.add(pp, "readOnly: left out of the input (OpenAPI: not sent in a request)")
					removed = append(removed, name)
					continue
				}
				if t.dir == fromUpstream && t.flag(pp, "writeOnly") && slices.Contains(stringList(o.arr("required")), name) {
					t.notes.add(pp, "writeOnly: not required in the output (OpenAPI: not returned in a response)")
					removed = append(removed, name)
				}
				props.set(name, t.emit(pp))
			}
			out.set(k, props)
		case k == "patternProperties":
			m, _ := v.(*object)
			props := newObject()
			for _, re := range m.keys {
				pp := kp + "/" + escapeToken(re)
				if _, err := regexp.Compile(re); err != nil {
					t.notes.add(pp, "patternProperties key %q is not an RE2 regular expression; not translated", re)
					continue
				}
				props.set(re, t.emit(pp))
			}
			out.set(k, props)
		case k == "dependentSchemas":
			m, _ := v.(*object)
			props := newObject()
			for _, name := range m.keys {
				props.set(name, t.emit(kp+"/"+escapeToken(name)))
			}
			out.set(k, props)
		case k == "required":
			out.set(k, v)
		case slices.Contains(schemaKeywords, k):
			if a, ok := v.([]any); ok { // items as a list (draft 2019-09 tuples)
				items := make([]any, len(a))
				for i := range a {
					items[i] = t.emit(kp + "/" + strconv.Itoa(i))
				}
				out.set("prefixItems", items)
				t.notes.add(kp, "items as a list is written as prefixItems (JSON Schema 2020-12)")
				continue
			}
			out.set(k, t.emit(kp))
		case slices.Contains(schemaListKeywords, k):
			a, _ := v.([]any)
			items := make([]any, len(a))
			for i := range a {
				items[i] = t.emit(kp + "/" + strconv.Itoa(i))
			}
			out.set(k, items)
		case slices.Contains(valueKeywords, k):
			out.set(k, v)
		default:
			t.notes.add(kp, "unknown keyword %q: not translated", k)
		}
	}
	// OpenAPI 3.0 exclusive bounds: exclusiveMinimum: true + minimum: m
	// is exclusiveMinimum: m in JSON Schema 2020-12.
	if minimum != nil {
		if exclMin {
			out.set("exclusiveMinimum", minimum)
		} else {
			out.set("minimum", minimum)
		}
	}
	if maximum != nil {
		if exclMax {
			out.set("exclusiveMaximum", maximum)
		} else {
			out.set("maximum", maximum)
		}
	}
	if len(removed) > 0 {
		var req []any
		for _, r := range o.arr("required") {
			if s, _ := r.(string); !slices.Contains(removed, s) {
				req = append(req, r)
			}
		}
		if len(req) == 0 {
			out.del("required")
		} else {
			out.set("required", req)
		}
	}
	if d := o.obj("discriminator"); d != nil {
		t.discriminator(out, o, d, p)
	}
	if nullable {
		return addNull(out)
	}
	return out
}

// flag reports whether the schema at p, or the schema its $ref leads to,
// sets the boolean keyword k.
func (t *translator) flag(p, k string) bool {
	v, _ := lookup(t.ix.root, p)
	o, _ := v.(*object)
	if o.boolean(k) && (!t.v30 || !o.has("$ref")) {
		return true
	}
	if o.has("$ref") {
		if target, err := t.ix.follow(p); err == nil {
			v, _ := lookup(t.ix.root, target)
			tgt, _ := v.(*object)
			return tgt.boolean(k)
		}
	}
	return false
}

// addNull makes s also accept null (OpenAPI 3.0 nullable: true): a type
// gains "null" (and an enum the value null); a schema without a type is
// wrapped in anyOf with {type: null}.
func addNull(s *object) any {
	switch ty := s.vals["type"].(type) {
	case string:
		s.set("type", []any{ty, "null"})
	case []any:
		if !slices.Contains(ty, any("null")) {
			s.set("type", append(ty, "null"))
		}
	default:
		null := newObject()
		null.set("type", "null")
		w := newObject()
		w.set("anyOf", []any{s, null})
		return w
	}
	if e := s.arr("enum"); e != nil && !slices.Contains(e, nil) {
		s.set("enum", append(e, nil))
	}
	return s
}

// discriminator translates an OpenAPI discriminator on a oneOf or anyOf
// to JSON Schema 2020-12: each branch that is a $ref requires the
// discriminating property to hold the branch's names (its mapping keys,
// else the component's name), so the property selects the branch as the
// discriminator says. A discriminator without oneOf/anyOf (on the base
// schema of an allOf hierarchy) names no subtypes and is a review note.
func (t *translator) discriminator(out, o, d *object, p string) {
	prop := d.str("propertyName")
	kw := ""
	for _, k := range []string{"oneOf", "anyOf"} {
		if o.has(k) {
			kw = k
			break
		}
	}
	if prop == "" || kw == "" {
		t.notes.add(p+"/discriminator", "discriminator without oneOf or anyOf: its subtypes are not listed here, so values are checked against this schema only")
		return
	}
	mapping := d.obj("mapping")
	branches := o.arr(kw)
	translated := out.arr(kw)
	for i, b := range branches {
		bp := p + "/" + kw + "/" + strconv.Itoa(i)
		bo, _ := b.(*object)
		target := ""
		if bo.has("$ref") {
			if f, err := t.ix.follow(bp); err == nil && f != bp {
				target = f
			}
		}
		if target == "" {
			t.notes.add(bp, "discriminator %q: an inline branch has no name to select it by; checked as a plain %s branch", prop, kw)
			continue
		}
		var names []any
		for _, key := range mapping.keys {
			if t.mappingTarget(mapping.str(key)) == target {
				names = append(names, key)
			}
		}
		if len(names) == 0 {
			tok := target[strings.LastIndex(target, "/")+1:]
			names = []any{unescapeToken(tok)}
		}
		sel := newObject()
		if len(names) == 1 {
			sel.set("const", names[0])
		} else {
			sel.set("enum", names)
		}
		props := newObject()
		props.set(prop, sel)
		w := newObject()
		w.set("allOf", []any{translated[i]})
		w.set("properties", props)
		w.set("required", []any{prop})
		translated[i] = w
	}
	out.set(kw, translated)
}

// mappingTarget resolves a discriminator mapping value: a schema name or
// a local reference.
func (t *translator) mappingTarget(v string) string {
	if strings.HasPrefix(v, "#") {
		p, _ := fragmentPointer(v[1:])
		if f, err := t.ix.follow(p); err == nil {
			return f
		}
		return p
	}
	p := "/components/schemas/" + escapeToken(v)
	if f, err := t.ix.follow(p); err == nil {
		return f
	}
	return p
}

func stringList(a []any) []string {
	out := make([]string, 0, len(a))
	for _, e := range a {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
