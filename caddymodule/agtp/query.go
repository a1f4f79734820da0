package agtp

import (
	"errors"
	"net/url"
	"unicode/utf8"
)

// ParseQuery parses the request's query once for every tier, refusing
// what net/url would partly drop (a malformed percent-escape, a ';'
// separator) and keys or values that are not UTF-8: parameters come from
// the pairs the agent sent, or the request is refused (400
// invalid-query, with the returned error as the explanation). A key
// given more than once (in any spelling: "a" and "%61" are one key once
// decoded) keeps all its values in order; every reader takes the last
// one (spec §2.1: repeated query keys keep the last value; QueryValue).
// Only AGTP requests are parsed here; legacy HTTP passes through
// untouched.
func ParseQuery(raw string) (url.Values, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, errors.New("the query string is malformed (a bad percent-escape or a ';' separator); encode each pair as key=value joined by '&'")
	}
	for k, vs := range vals {
		if !utf8.ValidString(k) {
			return nil, errors.New("a query key is not UTF-8 once percent-decoded")
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return nil, errors.New("a query value is not UTF-8 once percent-decoded")
			}
		}
	}
	return vals, nil
}

// QueryValue returns the value of query key name, the last one when
// the key is repeated (spec §2.1), and whether the key was given.
func QueryValue(q url.Values, name string) (string, bool) {
	vs := q[name]
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

// CanonicalQuery is q as its readers see it: each key once with the
// value every reader takes (the last, spec §2.1; QueryValue), keys
// sorted, key and value percent-encoded as url.Values.Encode does; ""
// when q holds no key (no query, "?" or "&" alone). Two queries that
// give every reader the same values have one canonical form, whatever
// their key order, escaping or repeated keys.
func CanonicalQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	last := make(url.Values, len(q))
	for k := range q {
		v, _ := QueryValue(q, k)
		last[k] = []string{v}
	}
	return last.Encode()
}
