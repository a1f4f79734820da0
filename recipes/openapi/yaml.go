package openapi

import (
	"bytes"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlDoc is a generated endpoint document: its values, the review
// comments at the end of some lines (by JSON pointer) and the comment
// heading the file.
type yamlDoc struct {
	root     *object
	comments map[string]string
	header   string
}

// Flow-style bounds: a mapping or list of scalars is written on one
// line ({type: string}, [a, b]) when it is this short.
const (
	flowMaxMembers = 4
	flowMaxChars   = 72
)

// encode writes the document as YAML with two-space indents. The output
// depends only on the values and comments: the same document gives the
// same bytes.
func (d *yamlDoc) encode() []byte {
	n := d.node(d.root, "")
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{n}}
	if d.header != "" {
		var lines []string
		for _, l := range strings.Split(d.header, "\n") {
			lines = append(lines, strings.TrimRight("# "+l, " "))
		}
		doc.HeadComment = strings.Join(lines, "\n")
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		panic("openapi: encoding a generated document: " + err.Error()) // values are plain JSON: a bug
	}
	enc.Close()
	return buf.Bytes()
}

func (d *yamlDoc) node(v any, ptr string) *yaml.Node {
	switch x := v.(type) {
	case *object:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		flow := x.len() <= flowMaxMembers
		for _, k := range x.keys {
			cp := ptr + "/" + escapeToken(k)
			key := scalarNode(k)
			val := d.node(x.vals[k], cp)
			if c := d.comments[cp]; c != "" {
				flow = false
				if val.Kind == yaml.ScalarNode || val.Style == yaml.FlowStyle {
					val.LineComment = "# " + c
				} else {
					key.LineComment = "# " + c
				}
			}
			if !flowable(val) {
				flow = false
			}
			n.Content = append(n.Content, key, val)
		}
		if x.len() == 0 || flow && flowLen(x) <= flowMaxChars {
			n.Style = yaml.FlowStyle
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		flow := true
		for i, e := range x {
			c := d.node(e, ptr+"/"+itoa(i))
			if c.Kind != yaml.ScalarNode || strings.Contains(c.Value, "\n") {
				flow = false
			}
			n.Content = append(n.Content, c)
		}
		if flow && flowLen(x) <= flowMaxChars {
			n.Style = yaml.FlowStyle
		}
		return n
	}
	return valueNode(v)
}

// flowable reports whether n may sit inside a one-line mapping.
func flowable(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.ScalarNode:
		return !strings.Contains(n.Value, "\n")
	case yaml.SequenceNode, yaml.MappingNode:
		if n.Style != yaml.FlowStyle {
			return false
		}
		for _, c := range n.Content {
			if !flowable(c) {
				return false
			}
		}
		return true
	}
	return false
}

// flowLen estimates the length of v written on one line.
func flowLen(v any) int {
	switch x := v.(type) {
	case *object:
		n := 2
		for _, k := range x.keys {
			n += len(k) + 4 + flowLen(x.vals[k])
		}
		return n
	case []any:
		n := 2
		for _, e := range x {
			n += flowLen(e) + 2
		}
		return n
	case string:
		return len(x) + 2
	case number:
		return len(x)
	}
	return 5
}

func scalarNode(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.Contains(s, "\n") {
		n.Style = yaml.LiteralStyle
	}
	return n
}

func valueNode(v any) *yaml.Node {
	switch x := v.(type) {
	case string:
		return scalarNode(x)
	case number:
		tag := "!!int"
		if strings.ContainsAny(string(x), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(x)}
	case bool:
		if x {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"}
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
