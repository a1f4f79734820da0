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
	proj *projection // non-nil when src is a plain projection (see compileProjection)
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
	return &Expr{src: src, vars: vars, code: code, proj: compileProjection(q, vars)}, nil
}

// projection is a jq object construction whose every value is a
// variable, or a chain of .name lookups on one — {k: $input.a, o: $step}
// — the shape of most step inputs and recipe outputs. It is evaluated
// without gojq's interpreter, with jq's semantics for it: a lookup on
// null is null, a missing name is null, and a later duplicate key wins.
// A lookup on anything but an object or null is a jq error, which eval
// leaves to gojq to produce. TestProjectionAgreesWithGojq holds the two
// to the same results.
type projection struct {
	keys  []string
	vars  []int      // index of each key's variable in the Eval values
	paths [][]string // each key's .name lookups
}

// compileProjection returns q's projection, or nil when q is anything
// else (any other term, operator, optional or iterating suffix, string
// interpolation, computed key, or a variable not in vars).
func compileProjection(q *gojq.Query, vars []string) *projection {
	plain := func(q *gojq.Query) bool {
		return q != nil && q.Term != nil && q.Left == nil && q.Right == nil && q.Meta == nil &&
			len(q.Imports) == 0 && len(q.FuncDefs) == 0 && len(q.Patterns) == 0 && q.Op == 0
	}
	if !plain(q) || q.Term.Type != gojq.TermTypeObject || q.Term.Object == nil || len(q.Term.SuffixList) > 0 {
		return nil
	}
	p := &projection{}
	for _, kv := range q.Term.Object.KeyVals {
		var key string
		switch {
		case kv.KeyQuery != nil:
			return nil
		case kv.KeyString != nil:
			if kv.KeyString.Queries != nil {
				return nil
			}
			key = kv.KeyString.Str
		case kv.Key != "" && kv.Key[0] != '$':
			key = kv.Key
		default:
			return nil
		}
		if !plain(kv.Val) {
			return nil
		}
		t := kv.Val.Term
		if t.Type != gojq.TermTypeFunc || t.Func == nil || len(t.Func.Args) > 0 {
			return nil
		}
		idx := -1 // the last binding of a name wins, as in gojq
		for i, v := range vars {
			if v == t.Func.Name {
				idx = i
			}
		}
		if idx < 0 {
			return nil
		}
		var path []string
		for _, sf := range t.SuffixList {
			if sf.Iter || sf.Optional || sf.Index == nil || sf.Index.IsSlice || sf.Index.Start != nil || sf.Index.End != nil {
				return nil
			}
			switch {
			case sf.Index.Str != nil && sf.Index.Str.Queries == nil:
				path = append(path, sf.Index.Str.Str)
			case sf.Index.Str == nil && sf.Index.Name != "":
				path = append(path, sf.Index.Name)
			default:
				return nil
			}
		}
		p.keys, p.vars, p.paths = append(p.keys, key), append(p.vars, idx), append(p.paths, path)
	}
	return p
}

// eval returns the projection's object, or false when gojq must decide
// (a lookup on a value that is not an object or null, or missing values).
// Eval calls it only with one value per variable and a live context
// (gojq answers a cancelled one with its error).
func (p *projection) eval(values []any) (map[string]any, bool) {
	out := make(map[string]any, len(p.keys))
	for i, k := range p.keys {
		if p.vars[i] >= len(values) {
			return nil, false
		}
		v := values[p.vars[i]]
		for _, name := range p.paths[i] {
			switch m := v.(type) {
			case nil:
			case map[string]any:
				v = m[name]
			default:
				return nil, false
			}
		}
		out[k] = v
	}
	return out, true
}

// objectKeys returns the keys of the object src builds when src is one
// plain jq object construction whose every key is static — {a: …},
// {"b": …}, {c}, {$d} — and false for any other expression (a computed
// or interpolated key, {$var: …}, a pipe, an operator, a suffix), whose
// keys are known only at run time.
func objectKeys(src string) ([]string, bool) {
	q, err := gojq.Parse(src)
	if err != nil || q.Term == nil || q.Left != nil || q.Right != nil || q.Meta != nil || q.Op != 0 ||
		len(q.Imports) > 0 || len(q.FuncDefs) > 0 || len(q.Patterns) > 0 ||
		q.Term.Type != gojq.TermTypeObject || q.Term.Object == nil || len(q.Term.SuffixList) > 0 {
		return nil, false
	}
	keys := make([]string, 0, len(q.Term.Object.KeyVals))
	for _, kv := range q.Term.Object.KeyVals {
		switch {
		case kv.Key != "" && kv.Key[0] == '$':
			if kv.Val != nil { // {$k: v}: the key is $k's value
				return nil, false
			}
			keys = append(keys, kv.Key[1:]) // {$k} is {k: $k}
		case kv.Key != "":
			keys = append(keys, kv.Key)
		case kv.KeyString != nil && kv.KeyString.Queries == nil:
			keys = append(keys, kv.KeyString.Str)
		default:
			return nil, false
		}
	}
	return keys, true
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
// (map[string]any, []any, float64, string, bool, nil). Errors quote the
// expression and wrap gojq's error: they are for the gateway's logs
// (Failure.Internal), never for agents (see mappingExplanation).
func (e *Expr) Eval(ctx context.Context, v any, values ...any) (any, error) {
	if e.proj != nil && len(values) == len(e.vars) && ctx.Err() == nil {
		if out, ok := e.proj.eval(values); ok {
			return out, nil
		}
	}
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
		return nil, fmt.Errorf("jq expression %q: %w", e.src, err)
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

// raisedMessage returns the message of an error(msg) (or halt_error(msg))
// that an operator's jq expression raised with a string msg: gojq's
// ValueError carrying a string. The operator wrote that text for
// callers. Any other error (a type error, no value, a non-string error
// value) reports false: its text is gojq's and may quote the expression
// or server-side values.
func raisedMessage(err error) (string, bool) {
	var ve gojq.ValueError
	if errors.As(err, &ve) {
		if msg, ok := ve.Value().(string); ok {
			return msg, true
		}
	}
	return "", false
}

// mappingExplanation is what an agent is told when a jq mapping failed:
// which mapping, in the agent's terms (what, such as "the query mapping
// for this endpoint"), plus the message of an error("…") the operator's
// expression raised. It never carries the expression or gojq's own text,
// which stay in Failure.Internal for the gateway's logs.
func mappingExplanation(what, on string, err error) string {
	expl := what + " failed on " + on
	if msg, ok := raisedMessage(err); ok {
		expl += ": " + msg
	}
	return expl
}
