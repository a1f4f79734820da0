package engine

import (
	"slices"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Bounds on what an agent's request puts into the records the gateway
// keeps (negotiation records, on disk and in INSPECT target=negotiations,
// and lifecycle events): a PROPOSE description, a REVOKE reason or a
// scope_requested value may be as large as the request body
// (max_request_body, 1 MiB by default), and every refused request,
// 429s included, is recorded. Cut values end in textcut.Ellipsis.
const (
	// MaxRecordedText is the most bytes of one string a record keeps
	// (the Ellipsis that marks a cut counted in it).
	MaxRecordedText = 1024
	// MaxRecordedRequest is the most bytes of strings, keys included,
	// that a negotiation record's requested side keeps in all: the
	// string that reaches it is cut, and an array or object stops
	// there, as past MaxRecordedItems.
	MaxRecordedRequest = 4096
	// MaxRecordedItems is the most elements of one array, or members of
	// one object, a record keeps: a longer array ends in one Ellipsis
	// element, a larger object keeps its first members in key order and
	// an Ellipsis member ("…": the count of members left out). Two keys
	// longer than MaxRecordedText that share their first bytes are
	// recorded as one.
	MaxRecordedItems = 32
	// maxRecordedDepth is the deepest array or object nesting kept.
	maxRecordedDepth = 4
)

// recordedRequest returns requested as a negotiation record keeps it:
// the pair (its "method" and "path" strings) whole up to MaxTargetBytes,
// so a record names what it granted or refused; every other string cut
// at MaxRecordedText, at most MaxRecordedRequest bytes of them in all,
// keys included (members in key order); at most MaxRecordedItems
// elements or members per array or object; nested at most four deep,
// requested itself counted. A value within the bounds is returned as
// is; otherwise a copy, so the caller's map is not changed.
func recordedRequest(requested map[string]any) map[string]any {
	if requested == nil || fitsRecord(requested, MaxRecordedRequest, 0) >= 0 {
		return requested
	}
	budget := MaxRecordedRequest
	return boundValue(requested, &budget, 0).(map[string]any)
}

// fitsRecord returns budget less the bytes of strings in v when v is
// within the bounds, else -1.
func fitsRecord(v any, budget, depth int) int {
	switch x := v.(type) {
	case string:
		if len(x) > MaxRecordedText {
			return -1
		}
		return budget - len(x)
	case map[string]any:
		if depth >= maxRecordedDepth || len(x) > MaxRecordedItems {
			return -1
		}
		for k, e := range x {
			if s, ok := e.(string); ok && isPair(k, depth) {
				if len(s) > MaxTargetBytes {
					return -1
				}
				continue
			}
			if len(k) > MaxRecordedText {
				return -1
			}
			if budget = fitsRecord(e, budget-len(k), depth+1); budget < 0 {
				return -1
			}
		}
	case []any:
		if depth >= maxRecordedDepth || len(x) > MaxRecordedItems {
			return -1
		}
		for _, e := range x {
			if budget = fitsRecord(e, budget, depth+1); budget < 0 {
				return -1
			}
		}
	case []string:
		if len(x) > MaxRecordedItems {
			return -1
		}
		for _, e := range x {
			if len(e) > MaxRecordedText {
				return -1
			}
			budget -= len(e)
		}
	}
	return budget
}

// boundValue is v within the bounds, charging its strings to budget.
func boundValue(v any, budget *int, depth int) any {
	switch x := v.(type) {
	case string:
		return boundString(x, budget)
	case map[string]any:
		if depth >= maxRecordedDepth || *budget <= 0 {
			return textcut.Ellipsis
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make(map[string]any, min(len(keys), MaxRecordedItems)+1)
		kept, left := 0, 0
		for _, k := range keys {
			if s, ok := x[k].(string); ok && isPair(k, depth) {
				out[k] = textcut.Truncate(s, MaxTargetBytes)
				continue
			}
			if kept == MaxRecordedItems || *budget <= 0 {
				left++
				continue
			}
			kept++
			k2 := boundString(k, budget)
			out[k2] = boundValue(x[k], budget, depth+1)
		}
		if left > 0 {
			out[textcut.Ellipsis] = left
		}
		return out
	case []string:
		items := make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
		return boundValue(items, budget, depth)
	case []any:
		if depth >= maxRecordedDepth || *budget <= 0 {
			return textcut.Ellipsis
		}
		out := make([]any, 0, min(len(x), MaxRecordedItems+1))
		for i, e := range x {
			if i == MaxRecordedItems || *budget <= 0 {
				out = append(out, textcut.Ellipsis)
				break
			}
			out = append(out, boundValue(e, budget, depth+1))
		}
		return out
	}
	return v
}

// isPair reports whether k, at depth, is the requested side's method
// or path: the pair, kept whole up to MaxTargetBytes and not charged to
// the budget.
func isPair(k string, depth int) bool { return depth == 0 && (k == "method" || k == "path") }

// boundString is s cut at MaxRecordedText and at what is left of
// budget, which it charges.
func boundString(s string, budget *int) string {
	n := min(MaxRecordedText, *budget)
	if n < len(textcut.Ellipsis) && len(s) > n {
		*budget = 0
		return textcut.Ellipsis
	}
	s = textcut.Truncate(s, max(n, len(textcut.Ellipsis)))
	*budget -= len(s)
	return s
}

// recordedText is s, an agent's free text in a record (a reason, an
// actor), cut at MaxRecordedText.
func recordedText(s string) string { return textcut.Truncate(s, MaxRecordedText) }
