package schema

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem in an operator document, located by file, line,
// column and JSON pointer.
//
// Line and Column are 1-based; Line is 0 when the problem has no place in
// the file (an empty file, an unreadable path), Column is 0 when only the
// line is known (YAML syntax errors). Pointer is an RFC 6901
// JSON pointer into the document ("" = the document root, "/steps/1/method"
// = the method of the second step). For a problem with one key of a
// mapping (an unknown field, a duplicate key) Line and Column are those of
// the key, which may differ from the line of Pointer.
type Error struct {
	File    string // the path as given to Parse, LoadFile or LoadPaths
	Line    int    // 1-based line, 0 if unknown
	Column  int    // 1-based column, 0 if unknown
	Pointer string // RFC 6901 JSON pointer of the offending node
	Message string // human-readable problem, without location
}

// Error formats e as "FILE:LINE:COL: at POINTER: MESSAGE". ":COL" is
// omitted when Column is 0, ":LINE:COL" when Line is 0, and "at POINTER: "
// when Pointer is empty.
func (e *Error) Error() string {
	var sb strings.Builder
	sb.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&sb, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&sb, ":%d", e.Column)
		}
	}
	sb.WriteString(": ")
	if e.Pointer != "" {
		sb.WriteString("at ")
		sb.WriteString(e.Pointer)
		sb.WriteString(": ")
	}
	sb.WriteString(e.Message)
	return sb.String()
}

// Errors is a list of document errors reported together (several schema
// violations in one document, or problems in several files). It is
// never empty when returned as an error.
type Errors []*Error

// Error joins the errors with newlines, ordered by file, line, column and
// pointer.
func (es Errors) Error() string {
	sorted := slices.Clone(es)
	sortErrors(sorted)
	lines := make([]string, len(sorted))
	for i, e := range sorted {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors, so that errors.As(err, &target) with target
// of type *Error finds the first one.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sortErrors orders es by file, line, column, pointer and message.
func sortErrors(es []*Error) {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Pointer, b.Pointer),
			cmp.Compare(a.Message, b.Message),
		)
	})
}

// asErrors flattens err into *Error values: an *Error or Errors is taken
// as is, any other error becomes an *Error of file without a location.
func asErrors(file string, err error) []*Error {
	switch e := err.(type) {
	case *Error:
		return []*Error{e}
	case Errors:
		return e
	default:
		return []*Error{{File: file, Message: err.Error()}}
	}
}
