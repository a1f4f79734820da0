package recipes

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

// TestContractHashForMatchesContractHash holds the load-time canonical
// path (ContractHashFor) equal to hashing the whole endpoint projection
// (ContractHash) and its endpoint bytes equal to the RFC 8785 form of
// that projection, for every bench recipe and for paths with a quote and
// non-ASCII characters.
func TestContractHashForMatchesContractHash(t *testing.T) {
	s, _ := benchSet(t)
	for _, r := range s.Recipes {
		for _, p := range []string{"/item/g-1", "/x\"y/é", "/a\u2028b<&>", "/t\tb\x01", "/bad\xff"} {
			ep := r.EndpointFor(r.Method, p)
			lin := r.Lineage()
			want, err := ContractHash(ep, &lin)
			if err != nil {
				t.Fatal(err)
			}
			got, raw, err := r.ContractHashFor(r.Method, p)
			if err != nil || got != want {
				t.Fatalf("%s %s: ContractHashFor = %s (%v), ContractHash = %s", r.Name, p, got, err, want)
			}
			m, _ := json.Marshal(ep)
			c, _ := jcs.Transform(m)
			if !bytes.Equal(c, raw) {
				t.Fatalf("%s %s: endpoint JSON is not the RFC 8785 form of the projection:\n%s\n%s", r.Name, p, raw, c)
			}
		}
	}
}
