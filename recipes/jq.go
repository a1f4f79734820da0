package recipes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/itchyny/gojq"
)

// Expr is a jq expression compiled once at load time
// (github.com/itchyny/gojq; ARCHITECTURE.md "Mapping"). It is safe for
// concurrent use.
type Expr struct {
	src  string
	vars []string
	code *gojq.Code
}

// CompileExpr parses and compiles src with the given variable names
// (each with its leading "$"). Errors carry gojq's message.
func CompileExpr(src string, vars []string) (*Expr, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("jq expression %q: %v", src, err)
	}
	code, err := gojq.Compile(q, gojq.WithVariables(vars))
	if err != nil {
		return nil, fmt.Errorf("jq expression %q: %v", src, err)
	}
	return &Expr{src: src, vars: vars, code: code}, nil
}

// uses reports, for each candidate variable, whether src cannot compile
// without it: that is, whether the expression reads it. Used to compute
// the step DAG at load.
func uses(src string, base, candidates []string) ([]bool, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(candidates))
	for i := range candidates {
		vars := append([]string{}, base...)
		for j, c := range candidates {
			if j != i {
				vars = append(vars, c)
			}
		}
		if _, err := gojq.Compile(q, gojq.WithVariables(vars)); err != nil {
			out[i] = true
		}
	}
	return out, nil
}

// String returns the expression's source.
func (e *Expr) String() string { return e.src }

// Eval runs the expression on input v with variable values in the
// order given at compile time and returns its single result. No result,
// several results or a jq error are errors; values are JSON values
// (map[string]any, []any, float64, string, bool, nil).
func (e *Expr) Eval(ctx context.Context, v any, values ...any) (any, error) {
	iter := e.code.RunWithContext(ctx, v, values...)
	out, ok := iter.Next()
	if !ok {
		return nil, fmt.Errorf("jq expression %q produced no value", e.src)
	}
	if err, isErr := out.(error); isErr {
		var he *gojq.HaltError
		if errors.As(err, &he) && he.Value() == nil {
			return nil, fmt.Errorf("jq expression %q halted", e.src)
		}
		return nil, fmt.Errorf("jq expression %q: %v", e.src, err)
	}
	if extra, more := iter.Next(); more {
		if _, isErr := extra.(error); !isErr {
			return nil, fmt.Errorf("jq expression %q produced more than one value", e.src)
		}
	}
	return out, nil
}

// normalize converts an arbitrary JSON-compatible value into the plain
// forms gojq and jsonschema accept (numbers as float64 or int).
func normalize(v any) (any, error) {
	switch v.(type) {
	case nil, bool, string, float64, int, map[string]any, []any:
		return v, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(raw, &out)
	return out, err
}
