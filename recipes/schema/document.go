package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Document is one validated operator document.
type Document struct {
	// File is the path (or name) the document was loaded from, as given.
	File string
	// Kind is the kind the document was validated as.
	Kind Kind
	// Value is the document as plain JSON values, exactly what
	// json.Unmarshal into an `any` would produce: map[string]any, []any,
	// string, float64 (every number), bool and nil. json.Marshal(Value)
	// round-trips.
	Value any

	// index maps each JSON pointer to the position of the node: for a
	// mapping member, its key; for a sequence item, the item; "" is the
	// document root.
	index map[string]position
	// huge maps the pointer of each number literal beyond float64's range
	// to the literal as written (parseYAML); validate refuses them.
	huge map[string]string
}

// Parse parses data as one operator document of kind k and validates it
// against the kind's embedded JSON Schema. name is used in errors (it is
// usually the file path) and becomes Document.File.
//
// The YAML rules (docs/configuration.md, ARCHITECTURE "Documents"):
// exactly one document; the root is a mapping; mapping keys are unique
// strings; no anchors, aliases or merge keys (<<); explicit tags only
// from the core schema (!!str !!int !!float !!bool !!null !!map !!seq);
// implicit timestamps stay strings; numbers must be finite.
//
// Errors: a syntax error, an empty file or a second document is one
// *Error; problems found while walking the YAML, and schema violations,
// come together as Errors (one *Error per problem, sorted by line), each
// with the JSON pointer and the line of the offending node. An unknown
// kind is an *Error without a location.
func Parse(name string, data []byte, k Kind) (*Document, error) {
	if _, ok := schemaFiles[k]; !ok {
		return nil, &Error{File: name, Message: fmt.Sprintf("unknown document kind %q", k)}
	}
	v, index, huge, err := parseYAML(name, data)
	if err != nil {
		return nil, err
	}
	d := &Document{File: name, Kind: k, Value: v, index: index, huge: huge}
	if err := d.validate(); err != nil {
		return nil, err
	}
	return d, nil
}

// LoadFile reads the file at path and parses it with Parse as a document
// of kind k. A read failure is an *Error of path without a location.
func LoadFile(path string, k Kind) (*Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Message: readProblem(err)}
	}
	return Parse(path, data, k)
}

// LoadPaths loads documents of kind k from paths, in order. A path is a
// file (loaded whatever its name) or a directory, read non-recursively:
// its *.yaml, *.yml and *.json files (extension compared without case,
// names starting with "." skipped, subdirectories ignored), sorted by
// name. A path that does not exist is an error; an empty directory
// yields no documents.
//
// Every file is tried; when any fails, LoadPaths returns no documents
// and Errors holding the problems of all files.
func LoadPaths(paths []string, k Kind) ([]*Document, error) {
	var docs []*Document
	var errs Errors
	for _, p := range paths {
		files, err := expandPath(p)
		if err != nil {
			// Named as the kind's path, which is the configuration's
			// knob (agents, endpoints, recipes), not only the file
			// (helper-148: a typo in one of three knobs read
			// "/x: cannot stat").
			errs = append(errs, &Error{File: p, Message: readProblem(err) + " (given as a path of " + string(k) + " documents, as `" + string(k) + "s`; a relative path is read from the working directory)"})
			continue
		}
		for _, f := range files {
			d, err := LoadFile(f, k)
			if err != nil {
				errs = append(errs, asErrors(f, err)...)
				continue
			}
			docs = append(docs, d)
		}
	}
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	return docs, nil
}

// expandPath lists the document files a path names.
func expandPath(p string) ([]string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p) // sorted by name
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		full := filepath.Join(p, name)
		fi, err := os.Stat(full) // follows symlinks
		if err != nil {
			return nil, err
		}
		if fi.IsDir() {
			continue
		}
		files = append(files, full)
	}
	return files, nil
}

// readProblem phrases a file-system error without repeating the path.
func readProblem(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return fmt.Sprintf("cannot %s: %v", pe.Op, pe.Err)
	}
	return err.Error()
}

// Decode re-encodes d.Value as JSON and unmarshals it into v (a pointer,
// typically to AgentDoc, EndpointDoc or RecipeDoc) with unknown fields
// disallowed. After a successful Parse it fails only if v does not match
// the schema of d.Kind; the error then names d.File.
func (d *Document) Decode(v any) error {
	b, err := json.Marshal(d.Value)
	if err != nil {
		return fmt.Errorf("%s: %w", d.File, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", d.File, err)
	}
	return nil
}

// Line returns the 1-based line and column of the node at the RFC 6901
// JSON pointer (for a mapping member, its key; "" is the document root).
// When no node is there it returns the position of the nearest ancestor
// that exists; (0, 0) only for a Document not made by Parse.
func (d *Document) Line(pointer string) (line, col int) {
	if d == nil || d.index == nil {
		return 0, 0
	}
	for {
		if p, ok := d.index[pointer]; ok {
			return p.line, p.col
		}
		if pointer == "" {
			return 0, 0
		}
		i := strings.LastIndexByte(pointer, '/')
		if i < 0 {
			pointer = ""
		} else {
			pointer = pointer[:i]
		}
	}
}

// valueAt returns the value at an RFC 6901 JSON pointer, or nil.
func (d *Document) valueAt(pointer string) any {
	v := d.Value
	if pointer == "" {
		return v
	}
	for _, t := range strings.Split(pointer[1:], "/") {
		t = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// Errorf returns an *Error in d.File located at the JSON pointer (line
// and column as Line reports), with the message fmt.Sprintf(format,
// args...). Other packages use it for checks beyond the schema, e.g.
// d.Errorf("/steps/1/path", "no endpoint %s %s is registered", m, p).
func (d *Document) Errorf(pointer, format string, args ...any) error {
	line, col := d.Line(pointer)
	return &Error{
		File:    d.File,
		Line:    line,
		Column:  col,
		Pointer: pointer,
		Message: fmt.Sprintf(format, args...),
	}
}
