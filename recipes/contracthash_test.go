package recipes

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

func BenchmarkProtoContractHashFor(b *testing.B) {
	s, _ := benchSet(b)
	for _, r := range s.Recipes {
		for _, p := range []string{"/item/g-1", "/x\"y/é"} {
			ep := r.EndpointFor(r.Method, p)
			lin := r.Lineage()
			want, _ := ContractHash(ep, &lin)
			got, raw, err := r.ContractHashFor(r.Method, p)
			if err != nil || got != want {
				b.Fatalf("%s %s: %s vs %s (%v)", r.Name, p, got, want, err)
			}
			m, _ := json.Marshal(ep)
			c, _ := jcs.Transform(m)
			if !bytes.Equal(c, raw) {
				b.Fatalf("endpoint JSON differs")
			}
		}
	}
	r := benchRecipe(b, s, "lookup-item")
	b.ReportAllocs()
	for b.Loop() {
		h, _, err := r.ContractHashFor("LOOKUP", "/item/g-1-1")
		if err != nil {
			b.Fatal(err)
		}
		sinkStr = h
	}
}
