package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestRecordedRequest: a requested side within the bounds is kept as
// is (the same map); past them every string is cut at MaxRecordedText,
// an array at MaxRecordedItems elements and an Ellipsis, an object at
// MaxRecordedItems members and an Ellipsis member giving the count left
// out, nesting at four levels, and all strings together at
// MaxRecordedRequest bytes; the caller's map is not changed.
func TestRecordedRequest(t *testing.T) {
	small := map[string]any{"method": "LOOKUP", "path": "/item/1", "persistent": false, "scope_requested": []any{"a:read"}}
	if got := recordedRequest(small); reflect.ValueOf(got).Pointer() != reflect.ValueOf(small).Pointer() {
		t.Errorf("a small requested side was copied")
	}

	long := strings.Repeat("x", 5000)
	members := map[string]any{}
	for i := range 40 {
		members[fmt.Sprintf("k%02d", i)] = i
	}
	deep := map[string]any{"a": map[string]any{"b": map[string]any{"c": map[string]any{"d": map[string]any{"e": 1}}}}}
	items := make([]any, 50)
	for i := range items {
		items[i] = i
	}
	in := map[string]any{"description": long, "items": items, "members": members, "deep": deep}
	before, _ := json.Marshal(in)
	got := recordedRequest(in)
	if after, _ := json.Marshal(in); string(after) != string(before) {
		t.Fatal("recordedRequest changed the caller's map")
	}
	if d := got["description"].(string); len(d) != MaxRecordedText || !strings.HasSuffix(d, "…") {
		t.Errorf("description: %d bytes", len(d))
	}
	if it := got["items"].([]any); len(it) != MaxRecordedItems+1 || it[MaxRecordedItems] != "…" || it[0] != 0 {
		t.Errorf("items: %v", it)
	}
	if m := got["members"].(map[string]any); len(m) != MaxRecordedItems+1 || m["…"] != 40-MaxRecordedItems || m["k00"] != 0 || m["k39"] != nil {
		t.Errorf("members: %v", m)
	}
	// deep → a → b → c: the fifth object down is cut.
	if c := got["deep"].(map[string]any)["a"].(map[string]any)["b"].(map[string]any)["c"]; c != "…" {
		t.Errorf("deep.a.b.c = %v, want …", c)
	}

	many := map[string]any{}
	for i := range 10 {
		many[fmt.Sprintf("s%d", i)] = strings.Repeat("y", 900)
	}
	got = recordedRequest(many)
	// Each member costs its key and value with their quotes (906 bytes),
	// the object its braces: s0…s3 whole, s4 cut to what is left (464
	// bytes with the mark), then the count of the five left out.
	if got["s0"] != many["s0"] || got["s3"] != many["s3"] || got["s9"] != nil || got["…"] != 5 {
		t.Errorf("s0 whole %v, s3 whole %v, s9 %.10q, … %v", got["s0"] == many["s0"], got["s3"] == many["s3"], got["s9"], got["…"])
	}
	if s4, _ := got["s4"].(string); len(s4) != 464 || !strings.HasSuffix(s4, "…") {
		t.Errorf("s4: %d bytes, want 464 ending in …", len(s4))
	}

	// Numbers, nulls and empty strings are charged too (helper-86: 32³
	// of them made an 822 KB record).
	for _, leaf := range []any{-1.2345678901234567e-300, 1e20, nil, "", true} {
		l2 := make([]any, 32)
		for i := range l2 {
			l3 := make([]any, 32)
			for j := range l3 {
				l4 := make([]any, 32)
				for k := range l4 {
					l4[k] = leaf
				}
				l3[j] = l4
			}
			l2[i] = l3
		}
		raw, _ := json.Marshal(recordedRequest(map[string]any{"scope_requested": l2}))
		if len(raw) > 2*MaxRecordedRequest {
			t.Errorf("scope_requested of 32³ %v: recorded in %d bytes of JSON", leaf, len(raw))
		}
	}

	// The count is every member not recorded under its own key: one
	// whose cut key is another's, one named "…", those past the budget.
	prefix := strings.Repeat("k", MaxRecordedText)
	col := recordedRequest(map[string]any{prefix + "1": "a", prefix + "2": "b", "…": "own"})
	if col["…"] != 2 || len(col) != 2 {
		t.Errorf("colliding keys and an own …: %v members, … = %v; want the first key and a count of 2", len(col), col["…"])
	}

	// A []string is bounded as the []any a decoded array is.
	strs := make([]string, 40)
	for i := range strs {
		strs[i] = strings.Repeat("s", 2000)
	}
	if got, _ := recordedRequest(map[string]any{"l": strs})["l"].([]any); len(got) == 0 || len(got) > MaxRecordedItems+1 || len(got[0].(string)) != MaxRecordedText || got[len(got)-1] != "…" {
		t.Errorf("[]string of 40 × 2000 bytes: %d elements", len(got))
	}

	// The pair is kept whole up to MaxTargetBytes and not charged, even
	// past the budget; long keys are charged to it as values are.
	path := "/" + strings.Repeat("p", 6000)
	keys := map[string]any{"method": "LOOKUP", "path": path}
	for i := range 20 {
		keys[fmt.Sprintf("a%02d", i)+strings.Repeat("k", 900)] = i
	}
	got = recordedRequest(keys)
	if got["path"] != path || got["method"] != "LOOKUP" {
		t.Errorf("pair not whole: %v, %d bytes", got["method"], len(fmt.Sprint(got["path"])))
	}
	total := 0
	for k := range got {
		if k != "path" && k != "method" && k != "…" { // the count's mark beside
			total += len(k)
		}
	}
	if total > MaxRecordedRequest {
		t.Errorf("keys in all: %d bytes (limit %d)", total, MaxRecordedRequest)
	}
	if cut := recordedRequest(map[string]any{"path": path + path})["path"].(string); len(cut) != MaxTargetBytes || !strings.HasSuffix(cut, "…") {
		t.Errorf("a %d-byte path recorded as %d bytes", 2*len(path), len(cut))
	}
	if recordedText(long) != long[:MaxRecordedText-len("…")]+"…" || recordedText("ok") != "ok" {
		t.Error("recordedText")
	}
}
