package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// position is a 1-based line and column in a document.
type position struct {
	line, col int
}

// converter turns a yaml.Node tree into plain JSON values (the values
// json.Unmarshal into an `any` produces: map[string]any, []any, string,
// float64, bool, nil) and records where each JSON pointer starts.
type converter struct {
	file  string
	index map[string]position
	errs  []*Error
	// huge maps the pointer of each number literal too large for a
	// float64 to the literal as written (see scalar).
	huge map[string]string
}

// yamlLineRE matches the location prefix of go.yaml.in/yaml/v3 errors.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlParserProblems are the problems raised by the YAML parser (as
// opposed to its scanner). go.yaml.in/yaml/v3 reports their line 0-based
// (the scanner's 1-based), and omits it on the first line.
var yamlParserProblems = []string{
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected <document start>",
	"did not find expected <stream-start>",
	"did not find expected key",
	"did not find expected node content",
	"found duplicate %TAG directive",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found undefined tag handle",
}

// syntaxError turns an error of the YAML parser into an *Error of file,
// with the line (no column) when the parser gives one.
func syntaxError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if slices.Contains(yamlParserProblems, msg) {
		line++
	}
	return &Error{File: file, Line: line, Message: "invalid YAML: " + msg}
}

// parseYAML parses data as exactly one YAML (or JSON) document whose root
// is a mapping, and converts it to plain JSON values.
//
// Refused, each as an *Error at the offending node: syntax errors, an
// empty document, a second document, anchors, aliases, merge keys, tags
// outside the core schema, non-string or duplicate mapping keys, numbers
// that are not finite, and a root that is not a mapping. Implicit
// timestamps stay strings. Several problems are returned together as
// Errors.
//
// A plain number literal beyond float64's range (1e400), which the YAML
// library resolves as a string, is converted to ±math.MaxFloat64 and
// returned in huge (pointer → literal as written): validate names it as
// out of range, with the field's range when the schema gives one, and
// never accepts it.
func parseYAML(file string, data []byte) (v any, index map[string]position, huge map[string]string, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil, &Error{File: file, Message: "empty document"}
		}
		return nil, nil, nil, syntaxError(file, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, nil, nil, &Error{File: file, Line: extra.Line, Column: extra.Column,
			Message: "more than one YAML document; a file holds exactly one"}
	case !errors.Is(err, io.EOF):
		return nil, nil, nil, syntaxError(file, err)
	}

	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) != 1 {
			return nil, nil, nil, &Error{File: file, Message: "empty document"}
		}
		root = root.Content[0]
	}
	c := &converter{file: file, index: make(map[string]position), huge: map[string]string{}}
	c.index[""] = position{root.Line, root.Column}
	if root.Kind != yaml.MappingNode {
		if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" && root.Style&yaml.TaggedStyle == 0 {
			return nil, nil, nil, &Error{File: file, Message: "empty document"}
		}
		return nil, nil, nil, c.errAt(root, "", fmt.Sprintf("document is %s, want a mapping", nodeKindName(root)))
	}
	v = c.value(root, "")
	if len(c.errs) > 0 {
		sortErrors(c.errs)
		return nil, nil, nil, Errors(c.errs)
	}
	return v, c.index, c.huge, nil
}

// errAt builds an *Error at node n and JSON pointer ptr.
func (c *converter) errAt(n *yaml.Node, ptr, msg string) *Error {
	return &Error{File: c.file, Line: n.Line, Column: n.Column, Pointer: ptr, Message: msg}
}

// fail records a problem at node n and JSON pointer ptr.
func (c *converter) fail(n *yaml.Node, ptr, format string, args ...any) {
	c.errs = append(c.errs, c.errAt(n, ptr, fmt.Sprintf(format, args...)))
}

// nodeKindName names the JSON shape of n for messages.
func nodeKindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!bool":
		return "a boolean"
	case "!!int", "!!float":
		return "a number"
	}
	return "a string"
}

// checkProps refuses anchors and explicit tags outside the core schema.
// It reports whether n may be converted.
func (c *converter) checkProps(n *yaml.Node, ptr string) bool {
	ok := true
	if n.Anchor != "" {
		c.fail(n, ptr, "YAML anchors are not allowed (&%s)", n.Anchor)
		ok = false
	}
	if n.Style&yaml.TaggedStyle != 0 {
		tag := n.ShortTag()
		var allowed bool
		switch n.Kind {
		case yaml.MappingNode:
			allowed = tag == "!!map"
		case yaml.SequenceNode:
			allowed = tag == "!!seq"
		case yaml.ScalarNode:
			switch tag {
			case "!!str", "!!int", "!!float", "!!bool", "!!null":
				allowed = true
			}
		}
		if !allowed {
			c.fail(n, ptr, "YAML tag %s is not allowed here (only !!str, !!int, !!float, !!bool, !!null, !!map, !!seq)", n.Tag)
			ok = false
		}
	}
	return ok
}

// value converts n, found at JSON pointer ptr, to a plain JSON value.
func (c *converter) value(n *yaml.Node, ptr string) any {
	if n.Kind == yaml.AliasNode {
		name := n.Value
		if n.Alias != nil && n.Alias.Anchor != "" {
			name = n.Alias.Anchor
		}
		c.fail(n, ptr, "YAML aliases are not allowed (*%s)", name)
		return nil
	}
	if !c.checkProps(n, ptr) {
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		return c.mapping(n, ptr)
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, item := range n.Content {
			p := ptr + "/" + strconv.Itoa(i)
			c.index[p] = position{item.Line, item.Column}
			out[i] = c.value(item, p)
		}
		return out
	case yaml.ScalarNode:
		return c.scalar(n, ptr)
	}
	c.fail(n, ptr, "unexpected YAML node")
	return nil
}

// mapping converts a mapping node; keys must be unique strings.
func (c *converter) mapping(n *yaml.Node, ptr string) map[string]any {
	out := make(map[string]any, len(n.Content)/2)
	first := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode {
			c.fail(k, ptr, "YAML aliases are not allowed (*%s)", k.Value)
			continue
		}
		if !c.checkProps(k, ptr) {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			c.fail(k, ptr, "mapping key is %s, want a string", nodeKindName(k))
			continue
		}
		switch tag := k.ShortTag(); tag {
		case "!!str", "!!timestamp":
		case "!!merge":
			c.fail(k, ptr, "YAML merge keys (<<) are not allowed")
			continue
		default:
			c.fail(k, ptr, "mapping key %s is %s, want a string (quote it)", k.Value, nodeKindName(k))
			continue
		}
		p := ptr + "/" + escapePointer(k.Value)
		if prev, dup := first[k.Value]; dup {
			c.fail(k, p, "duplicate key %s (first at line %d)", quote(k.Value), prev.Line)
			continue
		}
		first[k.Value] = k
		c.index[p] = position{k.Line, k.Column}
		out[k.Value] = c.value(v, p)
	}
	return out
}

// yamlFloat is the YAML library's number syntax (its yamlStyleFloat):
// a plain scalar matching it that the library resolved as a string is a
// number beyond float64's range.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// scalar converts a scalar by its resolved tag: !!int and !!float become
// float64, !!bool a bool, !!null nil, anything else (timestamps included)
// the string as written. A plain number too large for a float64 (the
// library resolves it as a string) becomes ±math.MaxFloat64, recorded in
// c.huge for validate to refuse.
func (c *converter) scalar(n *yaml.Node, ptr string) any {
	switch n.ShortTag() {
	case "!!str":
		if n.Style == 0 && yamlFloat.MatchString(n.Value) {
			if f, err := strconv.ParseFloat(n.Value, 64); errors.Is(err, strconv.ErrRange) && math.IsInf(f, 0) {
				c.huge[ptr] = n.Value
				return math.Copysign(math.MaxFloat64, f)
			}
		}
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.fail(n, ptr, "%s is not a valid !!bool", quote(n.Value))
			return nil
		}
		return b
	case "!!int", "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			c.fail(n, ptr, "%s is not a valid %s", quote(n.Value), n.ShortTag())
			return nil
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			c.fail(n, ptr, "number %s is not finite; JSON has no such number", n.Value)
			return nil
		}
		return f
	}
	return n.Value
}

// escapePointer escapes one RFC 6901 reference token.
func escapePointer(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	tok = strings.ReplaceAll(tok, "~", "~0")
	return strings.ReplaceAll(tok, "/", "~1")
}

// pointerOf joins unescaped tokens into an RFC 6901 JSON pointer.
func pointerOf(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		sb.WriteString(escapePointer(t))
	}
	return sb.String()
}
