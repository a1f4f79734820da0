package mcpdoor

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/go-json-experiment/json/jsontext"
)

// The ids of the messages the door reads: the id an envelope refusal
// answers (requestID) and the key a batch's calls are told apart by
// (idKey).

// requestID is the id of body when body is one request whose id can be
// determined, wherever the id stands among its members: a JSON object
// with a "method" member, no "result" or "error" member, and exactly
// one "id" member (names compared unescaped) that is a string or an
// integer idKey accepts. It is nil otherwise: a batch (refused whole),
// a response or a message that is neither (its id is not the client's
// request's), no id, two ids, or an id the door cannot echo exactly. A
// string id is the same string as the SDK writes it in its answers.
// body is valid JSON (a parse error was ruled out); members may repeat.
func requestID(body []byte) jsontext.Value {
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	if dec.PeekKind() != '{' {
		return nil
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil
	}
	var id jsontext.Value
	ids, method, response := 0, false, false
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		name := tok.String() // read before the value voids tok
		v, err := dec.ReadValue()
		if err != nil {
			return nil
		}
		switch name {
		case "id":
			ids++
			id = v.Clone()
		case "method":
			method = true
		case "result", "error":
			response = true
		}
	}
	if ids != 1 || !method || response {
		return nil
	}
	if _, f := idKey(id, "", false); f != nil {
		return nil
	}
	if id.Kind() == '"' {
		// As the SDK writes a string id it answers: unescaped, then
		// encoded by encoding/json ("\u0061" is answered "a").
		u, err := jsontext.AppendUnquote(nil, id)
		if err != nil {
			return nil
		}
		if id, err = json.Marshal(string(u)); err != nil {
			return nil
		}
	}
	return id
}

// unescaped is the JSON string raw (quotes included) with its escapes
// resolved, quoted again: "\u006dethod" reads as "method".
func unescaped(raw []byte) string {
	u, _ := jsontext.AppendUnquote(nil, raw)
	return `"` + string(u) + `"`
}

// idKey checks the id v of the message which: a string, or an integer
// of at most 2^53 in magnitude written without fraction or exponent
// (and not -0), the ids the SDK answers with the same value. When
// keyed (a batch), key is the id's kind and value ("s" and the string,
// or "n" and the literal, which such an integer writes one way only).
func idKey(v jsontext.Value, which string, keyed bool) (key string, f *rpcFault) {
	const rule = "an MCP request id is a string or an integer, and an integer id is answered exactly only without fraction or exponent and at most 2^53 = 9007199254740992 in magnitude (send other ids as strings)"
	switch v.Kind() {
	case '"':
		if !keyed {
			return "", nil
		}
		u, _ := jsontext.AppendUnquote([]byte("s"), v) // valid: the decoder read it
		return string(u), nil
	case '0':
		lit := string(v)
		digits := strings.TrimPrefix(lit, "-")
		switch {
		case strings.ContainsAny(lit, ".eE"):
			return "", invalid("the id of %s, %s, is not an integer: %s", which, textcut.Clip(lit), rule)
		case lit == "-0":
			return "", invalid("the id of %s is -0, which would be answered as 0: %s", which, rule)
		case jsonenc.InexactInteger(lit):
			return "", invalid("the id of %s is an integer of %d digits beyond ±2^53: %s", which, len(digits), rule)
		}
		if !keyed {
			return "", nil
		}
		return "n" + lit, nil
	case 'n':
		return "", invalid("the id of %s is null: %s", which, rule)
	case 't', 'f':
		return "", invalid("the id of %s is a boolean: %s", which, rule)
	}
	return "", invalid("the id of %s is an object or an array: %s", which, rule)
}
