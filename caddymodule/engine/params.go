package engine

import (
	"fmt"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// params returns a built-in's parameters: the envelope's "parameters"
// merged with top-level body keys (spec OP-25); a key given both ways
// with different values is 400.
func params(req *request) (map[string]any, *agtp.Error) {
	out, e := envelopeParameters(req)
	if e != nil {
		return nil, e
	}
	for k, v := range req.body {
		if envelopeKeys[k] {
			continue
		}
		// Compared as JSON values: "201" is not 201 (helper-149: their
		// printed forms were compared, and the top-level value won).
		if prev, ok := out[k]; ok && !reflect.DeepEqual(prev, v) {
			return nil, agtp.ParameterConflict.New(fmt.Sprintf("parameter %q is given twice with different values", textcut.Clip(k)))
		}
		out[k] = v
	}
	return out, nil
}

// envelopeParameters returns the envelope's "parameters" object (a new
// empty map when absent or null); 400 invalid-envelope when it is not an
// object. The map is the decoded body's own, which this request alone
// holds: callers add the query, path and top-level parameters to it in
// place instead of copying it.
func envelopeParameters(req *request) (map[string]any, *agtp.Error) {
	p, ok := req.body["parameters"]
	if !ok || p == nil {
		return map[string]any{}, nil
	}
	obj, ok := p.(map[string]any)
	if !ok {
		return nil, agtp.InvalidEnvelope.New("\"parameters\" must be a JSON object")
	}
	return obj, nil
}

// onlyParams refuses, with 400 invalid-parameter, a parameter that
// what (a state-changing built-in: REVOKE or SUSPEND, by target) does
// not read: misspelt, it would be ignored, and the change made without
// it cannot be taken back (helper-148: a resolve whose "stauts" and
// "reslut" were ignored stored 200 and a null result, replayed for the
// whole idempotency window, and a second settle is refused). The least
// unknown name is the one named, so the answer does not vary with map
// order; known lists what is read. Spec §7.1 holds endpoint inputs to
// the same rule (unknown fields fail); reads (INSPECT, DISCOVER) answer
// what they were asked and stay lenient.
//
// A query key it does not read (one of known not among
// builtinQueryParams, as status and result, which are read from the
// body only) is refused the same way.
func onlyParams(p map[string]any, q url.Values, what string, known ...string) *agtp.Error {
	unknown, found := "", false
	for k := range p {
		if !slices.Contains(known, k) && (!found || k < unknown) {
			unknown, found = k, true
		}
	}
	if found {
		return agtp.InvalidParameter.New(fmt.Sprintf("%s takes no parameter %q (it takes %s): nothing was changed", what, textcut.Clip(unknown), strings.Join(known, ", ")))
	}
	for k := range q {
		if (!slices.Contains(known, k) || !slices.Contains(builtinQueryParams, k)) && (!found || k < unknown) {
			unknown, found = k, true
		}
	}
	if !found {
		return nil
	}
	if slices.Contains(known, unknown) {
		return agtp.InvalidParameter.New(fmt.Sprintf("%s reads parameter %q from the body only, not the query: nothing was changed", what, textcut.Clip(unknown)))
	}
	return agtp.InvalidParameter.New(fmt.Sprintf("%s takes no parameter %q (it takes %s): nothing was changed", what, textcut.Clip(unknown), strings.Join(known, ", ")))
}

// given reports whether parameter name is present and not null.
func given(p map[string]any, name string) bool {
	v, ok := p[name]
	return ok && v != nil
}

// typedString reads the optional string parameter name of the
// built-in what: "" when not given; reason (a 400) when given as another
// JSON type.
func typedString(p map[string]any, what, name string, reason agtp.Reason) (string, *agtp.Error) {
	v := p[name]
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", reason.New(fmt.Sprintf("%s: parameter %s must be a string, not %s", what, name, schema.JSONTypeName(v)))
	}
	return s, nil
}

// strParam reads an optional string parameter: "" when not given, 400
// invalid-parameter when another JSON type (so a target of 5 is not
// reported as a missing target).
func strParam(p map[string]any, what, name string) (string, *agtp.Error) {
	return typedString(p, what, name, agtp.InvalidParameter)
}

// boolParam reads an optional boolean parameter: false when not given,
// 400 invalid-parameter when another JSON type ("true" is not true).
func boolParam(p map[string]any, what, name string) (bool, *agtp.Error) {
	v := p[name]
	if v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, agtp.InvalidParameter.New(fmt.Sprintf("%s: parameter %s must be true or false, not %s", what, name, schema.JSONTypeName(v)))
	}
	return b, nil
}

// agentParam reads an optional agent_id parameter: "" when not given,
// 400 invalid-parameter unless a canonical Agent-ID (64 lowercase hex).
// The check is syntax only: it says nothing of which agents exist.
func agentParam(p map[string]any, what string) (string, *agtp.Error) {
	id, e := strParam(p, what, "agent_id")
	if e != nil || !given(p, "agent_id") {
		return "", e
	}
	if !policy.ValidAgentID(id) {
		return "", agtp.InvalidParameter.New(what + ": parameter agent_id must be a canonical Agent-ID (64 lowercase hexadecimal characters)")
	}
	return id, nil
}

// sessionParam reads a session_id parameter: "" when not given (absent
// or null), else 400 invalid-session-id unless it is a string of the
// Session-ID form, the same refusal as the header and the envelope's
// session_id (no contract can belong to any other value).
func sessionParam(p map[string]any, what string) (string, *agtp.Error) {
	if !given(p, "session_id") {
		return "", nil
	}
	return agtp.SessionValue(p["session_id"], what+": parameter session_id")
}

// invalidLimit is the refusal of every bad limit.
func invalidLimit() *agtp.Error {
	return agtp.InvalidLimit.New(fmt.Sprintf("limit must be a positive integer (at most %d entries are served: a larger limit is served as %d)", MaxPageLimit, MaxPageLimit))
}

// limitValue is the one reader of a listing's limit (DISCOVER /methods
// and /contracts, INSPECT target=lifecycle): a positive integer, given as
// decimal digits in the query (inQuery) or as a JSON number in the body
// parameters. A limit above maxPageLimit is served as maxPageLimit;
// anything else (0, negative, fractional, not a number) is 400
// invalid-limit.
func limitValue(v any, inQuery bool) (int, *agtp.Error) {
	var n float64
	switch t := v.(type) {
	case string:
		if !inQuery || t == "" || strings.Trim(t, "0123456789") != "" {
			return 0, invalidLimit()
		}
		i, err := strconv.Atoi(t)
		if err != nil { // digits only: out of int range, so above the maximum
			i = MaxPageLimit
		}
		n = float64(i)
	case float64:
		if inQuery || t != math.Trunc(t) {
			return 0, invalidLimit()
		}
		n = t
	default:
		return 0, invalidLimit()
	}
	if n < 1 {
		return 0, invalidLimit()
	}
	return int(min(n, MaxPageLimit)), nil
}

// synthesisParam reads a synthesis_id parameter: missing → 400
// parameter-required, malformed → 400 invalid-synthesis-id.
func synthesisParam(x *exchange, p map[string]any, what string) (string, bool) {
	v, present := p["synthesis_id"]
	id, isString := v.(string)
	switch {
	case !present || v == nil:
		x.fail(agtp.ParameterRequired.New(what + " needs synthesis_id"))
		return "", false
	case !isString:
		x.fail(agtp.InvalidSynthesisID.New(fmt.Sprintf("%s: parameter synthesis_id must be a string, not %s", what, schema.JSONTypeName(v))))
		return "", false
	}
	if !recipes.ValidSynthesisID(id) {
		x.fail(agtp.InvalidSynthesisID.New("a synthesis id is 1-128 characters of A-Z a-z 0-9 . _ ~ -"))
		return "", false
	}
	return id, true
}

// builtinQueryParams are the parameters of INSPECT, REVOKE, SUSPEND
// and PROPOSE that may be given in the query as well as in the body
// (docs/agent-guide.md): the string-valued ones, and persistent, so that
// a query persistent=true is refused as not a boolean instead of being
// ignored. limit and cursor are read from the query by listingParam,
// which parses their string form there. Other query keys are not read.
var builtinQueryParams = []string{"target", "synthesis_id", "attempt_id", "audit_id", "agent_id", "session_id",
	"key", "action", "reason", "actor", "mode", "requested_duration", "persistent", "kind"}

// queryParams adds the builtinQueryParams given in the query q (the last
// value of a repeated key, spec §2.1) to the body parameters p. One
// given in both with different values is 400 parameter-conflict, as
// limit and cursor are (listingParam).
func queryParams(q url.Values, p map[string]any) *agtp.Error {
	if len(q) == 0 {
		return nil
	}
	for _, name := range builtinQueryParams {
		qv, ok := agtp.QueryValue(q, name)
		if !ok {
			continue
		}
		if given(p, name) {
			if !sameParam(name, p[name], qv) {
				return agtp.ParameterConflict.New(fmt.Sprintf("parameter %q is given in the query and in the body with different values", name))
			}
			continue
		}
		p[name] = qv
	}
	return nil
}

// sameParam reports whether a body value and the query's text of the
// same parameter say the same thing: equal strings, a boolean and its
// "true"/"false", a number and its decimal text, or two
// requested_duration forms of one duration ("1h" and "PT1H"). The body
// value keeps its own type, so a mistyped one is still refused by the
// parameter's own check.
func sameParam(name string, body any, query string) bool {
	switch v := body.(type) {
	case string:
		if v == query {
			return true
		}
		if name == "requested_duration" {
			a, errA := agtp.ParseRequestedDuration(v)
			b, errB := agtp.ParseRequestedDuration(query)
			return errA == nil && errB == nil && a == b
		}
		return false
	case bool:
		return strconv.FormatBool(v) == query
	case float64:
		q, err := strconv.ParseFloat(query, 64)
		return err == nil && q == v
	}
	return false
}

// listingParam returns a listing parameter given in the query (its
// last value when repeated, spec §2.1) or in the body parameters
// (read), refusing the two ways with different
// values (400 parameter-conflict, as params does for a key given at the
// top level and in parameters).
func listingParam[T comparable](q url.Values, p map[string]any, name string, def T, read func(v any, inQuery bool) (T, *agtp.Error)) (T, *agtp.Error) {
	out := def
	qv, inQuery := agtp.QueryValue(q, name) // the last value of a repeated key (spec §2.1)
	if inQuery {
		v, e := read(qv, true)
		if e != nil {
			return def, e
		}
		out = v
	}
	if given(p, name) {
		v, e := read(p[name], false)
		if e != nil {
			return def, e
		}
		if inQuery && v != out {
			return def, agtp.ParameterConflict.New(fmt.Sprintf("parameter %q is given in the query and in the body with different values", name))
		}
		out = v
	}
	return out, nil
}

// cursorValue reads a cursor: a string, in the query or the body
// parameters ("" is the first page); 400 invalid-cursor when another
// JSON type.
func cursorValue(v any, _ bool) (string, *agtp.Error) {
	s, ok := v.(string)
	if !ok {
		return "", agtp.InvalidCursor.New(fmt.Sprintf("cursor must be a string, not %s", schema.JSONTypeName(v)))
	}
	return s, nil
}
