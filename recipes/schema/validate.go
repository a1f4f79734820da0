package schema

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// validate checks d.Value against the schema of d.Kind and returns every
// violation as an *Error (in Errors), or nil.
func (d *Document) validate() error {
	c, err := loadSchemas()
	if err != nil {
		return err
	}
	s, ok := c.schemas[d.Kind]
	if !ok {
		return &Error{File: d.File, Message: fmt.Sprintf("unknown document kind %q", d.Kind)}
	}
	v := &violations{doc: d, c: c}
	if err = s.Validate(d.Value); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return &Error{File: d.File, Message: err.Error()}
		}
		v.collect(verr)
		if len(v.errs) == 0 {
			// Never expected: a failure without a leaf.
			v.add(nil, "", verr.Error())
		}
	}
	// A number beyond float64's range is never accepted; one the schema
	// bounds was reported with the field's range by collect.
	for ptr, lit := range d.huge {
		if !slices.ContainsFunc(v.errs, func(e *Error) bool { return e.Pointer == ptr }) {
			v.errs = append(v.errs, d.Errorf(ptr, "number %s is out of range: a number here must fit a 64-bit float (at most about 1.8e308 in magnitude)", lit).(*Error))
		}
	}
	if len(v.errs) == 0 {
		return nil
	}
	sortErrors(v.errs)
	v.errs = slices.CompactFunc(v.errs, func(a, b *Error) bool { return *a == *b })
	return Errors(v.errs)
}

// violations gathers the leaf errors of a jsonschema validation.
type violations struct {
	doc  *Document
	c    *compiled
	errs []*Error
}

// add records a message at the instance location tokens.
func (v *violations) add(tokens []string, keyToken, msg string) {
	ptr := pointerOf(tokens)
	e := v.doc.Errorf(ptr, "%s", msg).(*Error)
	if keyToken != "" {
		// Point at the key itself (an unknown field, a bad key).
		e.Line, e.Column = v.doc.Line(ptr + "/" + escapePointer(keyToken))
	}
	v.errs = append(v.errs, e)
}

// collect walks the error tree and turns each leaf into one *Error with
// a human message.
func (v *violations) collect(e *jsonschema.ValidationError) {
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Reference, *kind.Group, *kind.AllOf, *kind.AnyOf:
		for _, cause := range e.Causes {
			v.collect(cause)
		}
		if len(e.Causes) == 0 {
			v.add(e.InstanceLocation, "", describe(e.ErrorKind))
		}
	case *kind.OneOf:
		if names := v.oneOfRequired(e.SchemaURL); names != nil {
			got := "none"
			if len(k.Subschemas) > 0 {
				got = "more than one"
			}
			v.add(e.InstanceLocation, "", fmt.Sprintf("want exactly one of %s, got %s", quoteAll(names), got))
			return
		}
		if len(k.Subschemas) == 0 && len(e.Causes) > 0 {
			for _, cause := range e.Causes {
				v.collect(cause)
			}
			return
		}
		v.add(e.InstanceLocation, "", describe(k))
	case *kind.AdditionalProperties:
		patterns := v.keyPatterns(e.SchemaURL)
		for _, p := range k.Properties {
			msg := fmt.Sprintf("additional property %s not allowed", quote(p))
			if len(patterns) > 0 {
				msg = fmt.Sprintf("key %s not allowed, want a key matching %s", quote(p), strings.Join(patterns, " or "))
			}
			v.add(e.InstanceLocation, p, msg)
		}
	case *kind.UniqueItems:
		item := pointerOf(append(slices.Clone(e.InstanceLocation), strconv.Itoa(k.Duplicates[1])))
		v.add(e.InstanceLocation, "", fmt.Sprintf("duplicate item %s (items %d and %d)", display(v.doc.valueAt(item)), k.Duplicates[0], k.Duplicates[1]))
	case *kind.Contains:
		if want, ok := v.c.lookup(e.SchemaURL, "contains", "const").(string); ok {
			v.add(e.InstanceLocation, "", fmt.Sprintf("must list %s", quote(want)))
			return
		}
		v.add(e.InstanceLocation, "", describe(k))
	case *kind.Not:
		if c, ok := v.c.lookup(e.SchemaURL, "not", "const").(string); ok {
			v.add(e.InstanceLocation, "", fmt.Sprintf("must not be %s", quote(c)))
			return
		}
		v.add(e.InstanceLocation, "", describe(k))
	case *kind.Minimum, *kind.Maximum, *kind.ExclusiveMinimum, *kind.ExclusiveMaximum:
		// A titled number with a described range: name the knob and its
		// range instead of the bare bound that was crossed.
		t, want := v.str(e.SchemaURL, "title"), v.str(e.SchemaURL, "description")
		if lit, huge := v.doc.huge[pointerOf(e.InstanceLocation)]; huge {
			// A literal beyond float64's range: the value checked is a
			// stand-in (±math.MaxFloat64), so name the literal.
			if want == "" {
				want = describe(k)
			}
			v.add(e.InstanceLocation, "", fmt.Sprintf("number %s is out of range: %s", lit, want))
			return
		}
		if t != "" && want != "" {
			v.add(e.InstanceLocation, "", fmt.Sprintf("%s is not a valid %s: %s", display(v.doc.valueAt(pointerOf(e.InstanceLocation))), t, want))
			return
		}
		v.add(e.InstanceLocation, "", describe(k))
	case *kind.Pattern:
		if t := v.str(e.SchemaURL, "title"); t != "" {
			want := v.str(e.SchemaURL, "description")
			if want == "" {
				want = "want pattern " + k.Want
			}
			v.add(e.InstanceLocation, "", fmt.Sprintf("%s is not a valid %s: %s", quote(k.Got), t, want))
			return
		}
		v.add(e.InstanceLocation, "", describe(k))
	default:
		if len(e.Causes) > 0 {
			for _, cause := range e.Causes {
				v.collect(cause)
			}
			return
		}
		v.add(e.InstanceLocation, "", describe(e.ErrorKind))
	}
}

// oneOfRequired returns the property names when every branch of the
// oneOf at loc is {"required": [name]} ("exactly one of these keys").
func (v *violations) oneOfRequired(loc string) []string {
	branches, ok := v.c.lookup(loc, "oneOf").([]any)
	if !ok {
		return nil
	}
	var names []string
	for _, b := range branches {
		m, ok := b.(map[string]any)
		if !ok || len(m) != 1 {
			return nil
		}
		req, ok := m["required"].([]any)
		if !ok || len(req) != 1 {
			return nil
		}
		name, ok := req[0].(string)
		if !ok {
			return nil
		}
		names = append(names, name)
	}
	return names
}

// str returns the string keyword (title, description) of the schema at
// loc, or "".
func (v *violations) str(loc, keyword string) string {
	t, _ := v.c.lookup(loc, keyword).(string)
	return t
}

// keyPatterns returns the patternProperties patterns of the schema at loc
// when it declares no fixed properties (a map whose keys must match).
func (v *violations) keyPatterns(loc string) []string {
	if _, ok := v.c.lookup(loc, "properties").(map[string]any); ok {
		return nil
	}
	pp, ok := v.c.lookup(loc, "patternProperties").(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for p := range pp {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// describe phrases one error kind for an operator.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Required:
		if len(k.Missing) == 1 {
			return fmt.Sprintf("missing property %s", quote(k.Missing[0]))
		}
		return fmt.Sprintf("missing properties %s", quoteAll(k.Missing))
	case *kind.Type:
		return fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		return fmt.Sprintf("got %s, want one of %s", display(k.Got), strings.Join(want, ", "))
	case *kind.Const:
		return fmt.Sprintf("got %s, want %s", display(k.Got), display(k.Want))
	case *kind.Minimum:
		return fmt.Sprintf("got %s, want at least %s", ratString(k.Got), ratString(k.Want))
	case *kind.Maximum:
		return fmt.Sprintf("got %s, want at most %s", ratString(k.Got), ratString(k.Want))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("got %s, want more than %s", ratString(k.Got), ratString(k.Want))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("got %s, want less than %s", ratString(k.Got), ratString(k.Want))
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("got %s, want at least %d", plural.Count(k.Got, "character", "characters"), k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("got %s, want at most %d", plural.Count(k.Got, "character", "characters"), k.Want)
	case *kind.MinItems:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("got %s, want at least %d", plural.Count(k.Got, "item", "items"), k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("got %s, want at most %d", plural.Count(k.Got, "item", "items"), k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match pattern %s", quote(k.Got), k.Want)
	case *kind.FalseSchema:
		return "not allowed"
	}
	// Fall back on the library's own wording; DetailedOutput renders a
	// lone error kind with its default English printer.
	out := (&jsonschema.ValidationError{ErrorKind: k}).DetailedOutput()
	if out.Error != nil {
		return out.Error.String()
	}
	return "invalid value"
}

// ratString prints a schema number without a trailing ".0".
func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return fmt.Sprintf("%v", f)
}

// display prints a JSON value in a message: strings quoted, containers
// by shape.
func display(v any) string {
	switch v := v.(type) {
	case string:
		return quote(v)
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprint(v)
}

// quote wraps s in single quotes for messages; a value longer than
// textcut.EchoBytes, often a caller's (a PROPOSE semantic value), is cut
// at a character boundary and marked with "…", as every echo is.
func quote(s string) string {
	cut := ""
	if p := textcut.Prefix(s, textcut.EchoBytes); len(p) < len(s) {
		s, cut = p, textcut.Ellipsis
	}
	s = strconv.Quote(s)
	s = strings.ReplaceAll(s[1:len(s)-1], `\"`, `"`)
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" + cut
}

// quoteAll quotes and comma-joins names.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	return strings.Join(q, ", ")
}
