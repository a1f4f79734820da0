package engine

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// Bounds on what an agent's request puts into the records the gateway
// keeps (negotiation records, on disk and in INSPECT target=negotiations,
// lifecycle events, and the log lines of an ended contract): a PROPOSE
// description, a REVOKE reason or a scope_requested value may be as
// large as the request body (max_request_body, 1 MiB by default), and
// every refused request, 429s included, is recorded. Cut values end in
// textcut.Ellipsis.
const (
	// MaxRecordedText is the most bytes of one string a record keeps
	// (the Ellipsis that marks a cut counted in it).
	MaxRecordedText = 1024
	// MaxRecordedRequest is the most bytes of JSON a negotiation
	// record's requested side keeps besides its pair, each value counted
	// as its JSON text before escaping (a string's bytes and its quotes,
	// a number's digits, true, false, null, an array's or object's
	// brackets) and each key as a string, commas and colons not
	// counted: the string that reaches it is cut, and an array or
	// object stops there, as past MaxRecordedItems (the marks of those
	// cuts may take a few bytes past it). With the separators the side
	// is at most about 7 KiB of JSON before escaping.
	MaxRecordedRequest = 4096
	// MaxRecordedItems is the most elements of one array, or members of
	// one object, a record keeps: a longer array ends in one Ellipsis
	// element, a larger object keeps its first members in key order and
	// an Ellipsis member ("…": the count of members left out, which also
	// counts a member whose key, cut at MaxRecordedText, is another's,
	// and one whose key is the Ellipsis itself).
	MaxRecordedItems = 32
	// maxRecordedDepth is the deepest array or object nesting kept.
	maxRecordedDepth = 4
)

// recordedRequest returns requested as a negotiation record keeps it:
// the pair (its "method" and "path" strings) whole up to MaxTargetBytes,
// so a record names what it granted or refused; every other string cut
// at MaxRecordedText; at most MaxRecordedRequest bytes of JSON besides
// the pair (members in key order); at most MaxRecordedItems elements or
// members per array or object; nested at most four deep, requested
// itself counted. A value within the bounds is returned as is;
// otherwise a copy, so the caller's map is not changed.
func recordedRequest(requested map[string]any) map[string]any {
	if requested == nil || fitsRecord(requested, MaxRecordedRequest, 0) >= 0 {
		return requested
	}
	budget := MaxRecordedRequest
	return boundValue(requested, &budget, 0).(map[string]any)
}

// scalarCost is what a value other than an array or object is charged:
// the length of its JSON text before escaping.
func scalarCost(v any) int {
	switch x := v.(type) {
	case string:
		return len(x) + 2
	case nil:
		return 4
	case bool:
		if x {
			return 4
		}
		return 5
	case float64:
		// As encoding/json and JCS write it: plain digits from 1e-6 up
		// to 1e21, an exponent outside (helper-87: 1e20 is 21 bytes,
		// not the 5 of %g).
		f := byte('f')
		if a := math.Abs(x); a != 0 && (a < 1e-6 || a >= 1e21) {
			f = 'e'
		}
		var b [32]byte
		return len(strconv.AppendFloat(b[:0], x, f, -1, 64))
	case int:
		return len(strconv.Itoa(x))
	case int64:
		return len(strconv.FormatInt(x, 10))
	case json.Number:
		return len(x)
	}
	return 8
}

// fitsRecord returns budget less v's cost when v is within the bounds,
// else -1.
func fitsRecord(v any, budget, depth int) int {
	switch x := v.(type) {
	case map[string]any:
		if depth >= maxRecordedDepth || len(x) > MaxRecordedItems+2 {
			return -1
		}
		budget -= 2
		kept := 0
		for k, e := range x {
			if s, ok := e.(string); ok && isPair(k, depth) {
				if len(s) > MaxTargetBytes {
					return -1
				}
				continue
			}
			if kept++; kept > MaxRecordedItems || len(k) > MaxRecordedText || k == textcut.Ellipsis {
				return -1
			}
			if budget = fitsRecord(e, budget-len(k)-2, depth+1); budget < 0 {
				return -1
			}
		}
		return budget
	case []any:
		if depth >= maxRecordedDepth || len(x) > MaxRecordedItems {
			return -1
		}
		budget -= 2
		for _, e := range x {
			if budget = fitsRecord(e, budget, depth+1); budget < 0 {
				return -1
			}
		}
		return budget
	case []string:
		return fitsRecord(anySlice(x), budget, depth)
	case string:
		if len(x) > MaxRecordedText {
			return -1
		}
	}
	return budget - scalarCost(v)
}

// boundValue is v within the bounds, charging its cost to budget.
func boundValue(v any, budget *int, depth int) any {
	switch x := v.(type) {
	case string:
		return boundString(x, budget)
	case map[string]any:
		if depth >= maxRecordedDepth || *budget < 2 {
			return boundString(textcut.Ellipsis, budget)
		}
		*budget -= 2
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
			k2 := textcut.Truncate(k, MaxRecordedText)
			_, taken := out[k2]
			if kept == MaxRecordedItems || len(k2)+2 > *budget || taken || k2 == textcut.Ellipsis {
				left++
				continue
			}
			kept++
			*budget -= len(k2) + 2
			out[k2] = boundValue(x[k], budget, depth+1)
		}
		if left > 0 {
			out[textcut.Ellipsis] = left
		}
		return out
	case []string:
		return boundValue(anySlice(x), budget, depth)
	case []any:
		if depth >= maxRecordedDepth || *budget < 2 {
			return boundString(textcut.Ellipsis, budget)
		}
		*budget -= 2
		out := make([]any, 0, min(len(x), MaxRecordedItems+1))
		for i, e := range x {
			if i == MaxRecordedItems || *budget <= 0 {
				out = append(out, boundString(textcut.Ellipsis, budget))
				break
			}
			out = append(out, boundValue(e, budget, depth+1))
		}
		return out
	}
	*budget -= scalarCost(v)
	return v
}

// anySlice is x as the []any a decoded JSON array is, so a []string is
// bounded and charged as one.
func anySlice(x []string) []any {
	items := make([]any, len(x))
	for i, s := range x {
		items[i] = s
	}
	return items
}

// isPair reports whether k, at depth, is the requested side's method
// or path: the pair, kept whole up to MaxTargetBytes and not charged to
// the budget.
func isPair(k string, depth int) bool { return depth == 0 && (k == "method" || k == "path") }

// boundString is s cut at MaxRecordedText and at what is left of
// budget, which it charges (its bytes and its quotes).
func boundString(s string, budget *int) string {
	n := min(MaxRecordedText, *budget-2)
	if n < len(textcut.Ellipsis) && len(s) > n {
		s = textcut.Ellipsis
	} else {
		s = textcut.Truncate(s, max(n, len(textcut.Ellipsis)))
	}
	*budget -= len(s) + 2
	return s
}

// recordedText is s, an agent's free text in a record or a log line (a
// reason, an actor), cut at MaxRecordedText.
func recordedText(s string) string { return textcut.Truncate(s, MaxRecordedText) }
