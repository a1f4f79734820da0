package openapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"go.yaml.in/yaml/v3"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Limits on the OpenAPI document an import reads (docs/recipes.md,
// "Starting from OpenAPI").
const (
	// MaxDocumentBytes is the largest OpenAPI document ReadSpec and
	// Import accept: 50 MiB. A larger one is refused before it is parsed.
	MaxDocumentBytes = 50 << 20
	// MaxDocumentValues is the most JSON values (objects, arrays, strings,
	// numbers, booleans, nulls; keys not counted) the document may hold,
	// YAML aliases counted once per use: 4,000,000. It bounds the memory
	// a small document full of aliases could otherwise claim.
	MaxDocumentValues = 4_000_000
)

// maxPointerBytes bounds a JSON pointer quoted in an error (one into a
// value nested 10,000 deep would be 20 KB).
const maxPointerBytes = 256

// object is a JSON object that keeps its members in document order, so
// that everything derived from it (schemas, tables, files) comes out in
// the order the author wrote, the same bytes on every run.
type object struct {
	keys []string
	vals map[string]any
}

// number is a JSON number as its literal text ("10", "1.5e3"): kept
// exact, never rounded through a float64.
type number string

func newObject() *object { return &object{vals: map[string]any{}} }

// get returns the member k and whether it exists.
func (o *object) get(k string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[k]
	return v, ok
}

// set sets member k, appending it when new.
func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// del removes member k.
func (o *object) del(k string) {
	if _, ok := o.vals[k]; !ok {
		return
	}
	delete(o.vals, k)
	for i, x := range o.keys {
		if x == k {
			o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
			break
		}
	}
}

// has reports whether member k exists.
func (o *object) has(k string) bool { _, ok := o.get(k); return ok }

// str returns member k when it is a string, else "".
func (o *object) str(k string) string {
	v, _ := o.get(k)
	s, _ := v.(string)
	return s
}

// obj returns member k when it is an object, else nil.
func (o *object) obj(k string) *object {
	v, _ := o.get(k)
	m, _ := v.(*object)
	return m
}

// arr returns member k when it is an array, else nil.
func (o *object) arr(k string) []any {
	v, _ := o.get(k)
	a, _ := v.([]any)
	return a
}

// boolean returns member k when it is a boolean, else false.
func (o *object) boolean(k string) bool {
	v, _ := o.get(k)
	b, _ := v.(bool)
	return b
}

// len returns the number of members.
func (o *object) len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// clone copies o and, recursively, every object and array in it.
func clone(v any) any {
	switch x := v.(type) {
	case *object:
		c := &object{keys: append([]string(nil), x.keys...), vals: make(map[string]any, len(x.vals))}
		for k, e := range x.vals {
			c.vals[k] = clone(e)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = clone(e)
		}
		return c
	}
	return v
}

// ReadSpec reads the OpenAPI document at path, refusing one larger than
// MaxDocumentBytes without reading past the limit. The error names the
// file.
func ReadSpec(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Message: fmt.Sprintf("cannot read the document: %v", unwrapPath(err))}
	}
	defer f.Close()
	return readLimited(path, f, MaxDocumentBytes)
}

// readLimited reads r to its end, or fails as soon as it has read more
// than limit bytes.
func readLimited(name string, r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &Error{File: name, Message: fmt.Sprintf("cannot read the document: %v", unwrapPath(err))}
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(name, limit)
	}
	return data, nil
}

func tooLarge(name string, limit int64) error {
	return &Error{File: name, Message: fmt.Sprintf("the document is larger than %d bytes (%d MiB), the most an import reads; split it or import a smaller description", limit, limit>>20)}
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parseDocument parses data, a JSON or YAML document, into plain values:
// *object, []any, string, number, bool and nil. JSON (a document whose
// first non-blank byte is '{') is read with encoding/json/v2's token
// reader; anything else as YAML 1.2, where mapping keys that are
// numbers or booleans (an unquoted 200:) become their text, timestamps
// stay strings, aliases are expanded (each use counted against
// MaxDocumentValues), and merge keys, custom tags, duplicate keys and
// non-finite numbers are refused.
func parseDocument(name string, data []byte) (any, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return parseJSON(name, trimmed)
	}
	return parseYAML(name, data)
}

func parseJSON(name string, data []byte) (any, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	count := 0
	var read func() (any, error)
	read = func() (any, error) {
		count++
		if count > MaxDocumentValues {
			return nil, fmt.Errorf("the document holds more than %d values, the most an import reads", MaxDocumentValues)
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		switch tok.Kind() {
		case '{':
			o := newObject()
			for dec.PeekKind() != '}' {
				kt, err := dec.ReadToken()
				if err != nil {
					return nil, err
				}
				key := kt.String() // before the next read voids kt
				v, err := read()
				if err != nil {
					return nil, err
				}
				o.set(key, v)
			}
			if _, err := dec.ReadToken(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			a := []any{}
			for dec.PeekKind() != ']' {
				v, err := read()
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.ReadToken(); err != nil {
				return nil, err
			}
			return a, nil
		case '"':
			return tok.String(), nil
		case '0':
			return number(tok.String()), nil
		case 't':
			return true, nil
		case 'f':
			return false, nil
		case 'n':
			return nil, nil
		}
		return nil, fmt.Errorf("unexpected JSON token %v", tok)
	}
	v, err := read()
	if err == nil {
		if _, extra := dec.ReadToken(); extra != io.EOF {
			err = errors.New("text after the JSON document")
		}
	}
	if err != nil {
		var se *jsontext.SyntacticError
		if errors.As(err, &se) && se.Err != nil {
			return nil, &Error{File: name, Pointer: textcut.Truncate(string(se.JSONPointer), maxPointerBytes), Message: fmt.Sprintf("invalid JSON at byte %d: %v", se.ByteOffset, se.Err)}
		}
		return nil, &Error{File: name, Message: "invalid JSON: " + strings.TrimPrefix(err.Error(), "jsontext: ")}
	}
	return v, nil
}

// yamlConverter turns a yaml.Node tree into plain values.
type yamlConverter struct {
	count int
	// expanding holds the anchors being expanded, to refuse an alias
	// inside its own anchor.
	expanding map[*yaml.Node]bool
}

func parseYAML(name string, data []byte) (any, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, &Error{File: name, Message: "the document is empty"}
		}
		return nil, &Error{File: name, Message: "invalid YAML: " + yamlProblem(err)}
	}
	var second yaml.Node
	if err := dec.Decode(&second); err != io.EOF {
		return nil, &Error{File: name, Message: "the file holds more than one YAML document; an import reads exactly one"}
	}
	c := &yamlConverter{expanding: map[*yaml.Node]bool{}}
	v, err := c.convert(&doc, "")
	if err != nil {
		return nil, &Error{File: name, Pointer: err.(*pointerError).ptr, Message: err.(*pointerError).msg}
	}
	return v, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlProblem phrases a go.yaml.in/yaml/v3 syntax error. The library
// counts lines from 0 for the problems its parser (not its scanner)
// finds, all of which read "did not find expected …"; they are given
// here from 1, as the scanner's are.
func yamlProblem(err error) string {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	line, _ := strconv.Atoi(m[1])
	if strings.HasPrefix(m[2], "did not find expected") {
		line++
	}
	return fmt.Sprintf("line %d: %s", line, m[2])
}

// pointerError is a conversion problem at a JSON pointer.
type pointerError struct{ ptr, msg string }

func (e *pointerError) Error() string { return e.ptr + ": " + e.msg }

func (c *yamlConverter) fail(n *yaml.Node, ptr, format string, args ...any) error {
	return &pointerError{ptr: ptr, msg: fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}
}

func (c *yamlConverter) convert(n *yaml.Node, ptr string) (any, error) {
	c.count++
	if c.count > MaxDocumentValues {
		return nil, c.fail(n, ptr, "the document holds more than %d values (YAML aliases counted once per use), the most an import reads", MaxDocumentValues)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, c.fail(n, ptr, "the document is empty")
		}
		c.count--
		return c.convert(n.Content[0], ptr)
	case yaml.AliasNode:
		if c.expanding[n.Alias] {
			return nil, c.fail(n, ptr, "alias *%s refers to its own anchor", n.Value)
		}
		c.expanding[n.Alias] = true
		defer delete(c.expanding, n.Alias)
		c.count--
		return c.convert(n.Alias, ptr)
	case yaml.MappingNode:
		o := newObject()
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.AliasNode {
				k = k.Alias
			}
			if k.Kind != yaml.ScalarNode {
				return nil, c.fail(k, ptr, "a mapping key must be a scalar")
			}
			if k.Tag == "!!merge" {
				return nil, c.fail(k, ptr, "YAML merge keys (<<) are not supported; write the members out")
			}
			if o.has(k.Value) {
				return nil, c.fail(k, ptr, "duplicate key %q", k.Value)
			}
			child := ptr + "/" + escapeToken(k.Value)
			x, err := c.convert(v, child)
			if err != nil {
				return nil, err
			}
			o.set(k.Value, x)
		}
		return o, nil
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		for i, e := range n.Content {
			x, err := c.convert(e, ptr+"/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			a = append(a, x)
		}
		return a, nil
	case yaml.ScalarNode:
		return c.scalar(n, ptr)
	}
	return nil, c.fail(n, ptr, "unexpected YAML node")
}

func (c *yamlConverter) scalar(n *yaml.Node, ptr string) (any, error) {
	switch n.ShortTag() {
	case "!!str", "!!timestamp":
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, c.fail(n, ptr, "invalid boolean %q", n.Value)
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return number(strconv.FormatInt(i, 10)), nil
		}
		var u uint64
		if err := n.Decode(&u); err == nil {
			return number(strconv.FormatUint(u, 10)), nil
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, c.fail(n, ptr, "invalid integer %q", n.Value)
		}
		return number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, c.fail(n, ptr, "number %q is not finite; JSON has no such number", n.Value)
		}
		return number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return nil, c.fail(n, ptr, "tag %s is not supported; an OpenAPI document holds JSON values only", n.Tag)
}

// escapeToken escapes one RFC 6901 reference token.
func escapeToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}

// unescapeToken undoes escapeToken.
func unescapeToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
}

// lookup returns the value at the JSON pointer ptr in root.
func lookup(root any, ptr string) (any, bool) {
	if ptr == "" {
		return root, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	v := root
	for _, t := range strings.Split(ptr[1:], "/") {
		t = unescapeToken(t)
		switch x := v.(type) {
		case *object:
			var ok bool
			if v, ok = x.get(t); !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) || strconv.Itoa(i) != t {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// writeJSON writes v as compact JSON (numbers as their literal text).
func writeJSON(buf *bytes.Buffer, v any) {
	switch x := v.(type) {
	case *object:
		buf.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			writeJSON(buf, x.vals[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSON(buf, e)
		}
		buf.WriteByte(']')
	case string:
		writeString(buf, x)
	case number:
		buf.WriteString(string(x))
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case nil:
		buf.WriteString("null")
	}
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := jsontext.AppendQuote(nil, s)
	buf.Write(b)
}
