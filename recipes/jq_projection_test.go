package recipes

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestProjectionAgreesWithGojq: for projection-shaped expressions and
// random variable values, the projection's result is gojq's, and where
// the projection declines (a lookup on a string, number or array) gojq's
// own answer (an error) stands.
func TestProjectionAgreesWithGojq(t *testing.T) {
	vars := []string{"$input", "$a", "$b"}
	exprs := []string{
		`{item_id: $input.item_id}`,
		`{item: $a}`,
		`{a: $a, b: $b, c: $input}`,
		`{"k y": $a.x.y, z: $b.z, "q": $input.item_id}`,
		`{x: $a.x, x: $b.x}`,
		`{}`,
		`{deep: $input.a.b.c.d}`,
	}
	r := rand.New(rand.NewPCG(3, 4))
	vals := func() any { return randValue(r, 3) }
	for _, src := range exprs {
		e, err := CompileExpr(src, vars)
		if err != nil {
			t.Fatalf("CompileExpr(%s): %v", src, err)
		}
		if e.proj == nil {
			t.Fatalf("%s did not compile to a projection", src)
		}
		declined := 0
		for range 400 {
			values := []any{vals(), vals(), vals()}
			if r.IntN(2) == 0 {
				values[0] = map[string]any{"item_id": "i-1", "a": map[string]any{"b": map[string]any{"c": map[string]any{"d": 1.5}}}}
			}
			slow := &Expr{src: e.src, vars: e.vars, code: e.code} // gojq only
			want, wantErr := slow.Eval(context.Background(), nil, values...)
			got, ok := e.proj.eval(values)
			if !ok {
				declined++
				if wantErr == nil {
					t.Fatalf("%s on %#v: projection declined, gojq answered %#v", src, values, want)
				}
				gotV, gotErr := e.Eval(context.Background(), nil, values...)
				if gotErr == nil || gotErr.Error() != wantErr.Error() {
					t.Fatalf("%s on %#v: Eval = %v, %v; gojq error %v", src, values, gotV, gotErr, wantErr)
				}
				continue
			}
			if wantErr != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s on %#v: projection %#v, gojq %#v (%v)", src, values, got, want, wantErr)
			}
		}
		if declined == 400 {
			t.Fatalf("%s: the projection declined every case", src)
		}
	}
	for _, src := range []string{
		`{a: $a.x?}`, `{a: $a[0]}`, `{a: $a[]}`, `{a: ($a | length)}`, `{($a): 1}`, `{"\($a)": 1}`, `{$a}`,
		`{a: $a} | .a`, `{a: $a.x.y, b: 1}`, `[$a]`, `$a`, `{a: $a + 1}`, `{a: $__loc__}`, `{a: $ENV.HOME}`,
	} {
		e, err := CompileExpr(src, vars)
		if err != nil {
			continue // not valid jq with these variables: nothing to decide
		}
		if e.proj != nil {
			t.Errorf("%s compiled to a projection", src)
		}
	}
}

// TestProjectionDefersToGojq: a cancelled context, a wrong number of
// values and a rebound variable name get gojq's answer, not the
// projection's.
func TestProjectionDefersToGojq(t *testing.T) {
	e, err := CompileExpr(`{a: $x}`, []string{"$x", "$y"})
	if err != nil || e.proj == nil {
		t.Fatalf("CompileExpr: %v, projection %v", err, e.proj)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Eval(ctx, nil, 1, 2); err == nil {
		t.Error("Eval with a cancelled context succeeded; gojq refuses it")
	}
	if _, err := e.Eval(context.Background(), nil, 1); err == nil {
		t.Error("Eval with one value for two variables succeeded")
	}
	if _, err := e.Eval(context.Background(), nil, 1, 2, 3); err == nil {
		t.Error("Eval with three values for two variables succeeded")
	}
	d, err := CompileExpr(`{a: $x}`, []string{"$x", "$x"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Eval(context.Background(), nil, 1, 2)
	if err != nil || !reflect.DeepEqual(got, map[string]any{"a": 2}) {
		t.Errorf("rebound $x: %v, %v; want {a: 2} (the last binding)", got, err)
	}
}
