package mcpdoor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/go-json-experiment/json/jsontext"
)

// TestBoundResult: an array result over max_result_bytes is cut at an
// item boundary and says so; one within it is untouched; an object over
// it is result-too-large; an endpoint's own bound wins.
func TestBoundResult(t *testing.T) {
	d := &Door{cfg: &Config{MaxResultBytes: 300}}
	item := `{"id":"` + strings.Repeat("x", 40) + `"}` // 49 bytes
	var items []string
	for range 20 {
		items = append(items, item)
	}
	big := "[" + strings.Join(items, ",") + "]"
	tool := &mcpTool{name: "list_things"}

	out := map[string]any{"result": jsontext.Value(big)}
	if e := d.boundResult(tool, out); e != nil {
		t.Fatalf("array: %v", e)
	}
	kept := out["result"].(jsontext.Value)
	var got []any
	if err := json.Unmarshal(kept, &got); err != nil || len(kept) > 300 {
		t.Fatalf("cut result %s (%d bytes): %v", kept, len(kept), err)
	}
	if out["truncated"] != true || out["total_items"] != 20 || out["returned_items"] != len(got) || len(got) != 5 {
		t.Fatalf("truncated %v total %v returned %v (kept %d)", out["truncated"], out["total_items"], out["returned_items"], len(got))
	}
	if note, _ := out["note"].(string); !strings.Contains(note, "first 5 of 20 items") || !strings.Contains(note, "Narrow") {
		t.Fatalf("note = %q", note)
	}

	small := map[string]any{"result": jsontext.Value("[" + item + "]")}
	if e := d.boundResult(tool, small); e != nil || small["truncated"] != nil {
		t.Fatalf("within the bound: %v %v", e, small)
	}

	obj := map[string]any{"result": jsontext.Value(`{"blob":"` + strings.Repeat("y", 400) + `"}`)}
	if e := d.boundResult(tool, obj); e == nil || e.Reason != "result-too-large" {
		t.Fatalf("object over the bound: %v", e)
	}

	own := &mcpTool{name: "list_more", ep: &recipes.Endpoint{MaxResultBytes: 4096}}
	out = map[string]any{"result": jsontext.Value(big)}
	if e := d.boundResult(own, out); e != nil || out["truncated"] != nil {
		t.Fatalf("the endpoint's bound: %v %v", e, out["truncated"])
	}
}
