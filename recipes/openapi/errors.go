package openapi

import (
	"fmt"
	"strings"
)

// Error is one problem that stops an import: nothing is written when
// Import or WriteDir returns one.
type Error struct {
	// File is the OpenAPI document as Options.Source names it.
	File string
	// Operation names the operation the problem belongs to, as
	// "getPetById (GET /pet/{petId})", or the operations that use a broken
	// component; "" for a problem of the document as a whole (its size,
	// its syntax, its version).
	Operation string
	// Pointer is the RFC 6901 JSON pointer of the offending node in the
	// OpenAPI document ("/paths/~1pet/get/parameters/0"); "" when the
	// problem has no place in it (the size limit, a flag).
	Pointer string
	// Message says what is wrong and, where there is one, what to do.
	Message string
}

// Error formats e as "FILE: operation OP: at POINTER: MESSAGE", leaving
// out the parts that are empty.
func (e *Error) Error() string {
	var sb strings.Builder
	if e.File != "" {
		sb.WriteString(e.File)
		sb.WriteString(": ")
	}
	if e.Operation != "" {
		sb.WriteString("operation ")
		sb.WriteString(e.Operation)
		sb.WriteString(": ")
	}
	if e.Pointer != "" {
		sb.WriteString("at ")
		sb.WriteString(e.Pointer)
		sb.WriteString(": ")
	}
	sb.WriteString(e.Message)
	return sb.String()
}

// Errors is every problem an import found, in document order (operations
// sorted as the import sorts them). It is never empty when returned.
type Errors []*Error

// Error joins the problems, one per line, with a count first when there
// are several.
func (es Errors) Error() string {
	if len(es) == 1 {
		return es[0].Error()
	}
	lines := make([]string, 0, len(es)+1)
	lines = append(lines, fmt.Sprintf("%d problems:", len(es)))
	for _, e := range es {
		lines = append(lines, "  "+e.Error())
	}
	return strings.Join(lines, "\n")
}

// errorList gathers problems and returns them as Errors, or nil.
type errorList struct {
	file string
	errs Errors
}

func (l *errorList) add(op, ptr, format string, args ...any) {
	l.errs = append(l.errs, &Error{File: l.file, Operation: op, Pointer: ptr, Message: fmt.Sprintf(format, args...)})
}

func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return l.errs
}
