package upstreamauth

import (
	"fmt"
	"os"
	"strings"
)

// template is a compiled header value template: literal text, {agent},
// {owner}, {secret} and {env.NAME} where NAME may hold {agent} and
// {owner}.
type template struct {
	parts        []part
	usesSecret   bool
	usesEnvPerID bool // an {env.…} whose name holds {agent} or {owner}
}

type partKind uint8

const (
	partText partKind = iota
	partID            // name: "agent" or "owner"
	partSecret
	partEnv // env: the name's parts (text and ids)
)

type part struct {
	kind partKind
	text string // partText: the text; partID: "agent" or "owner"
	env  []part // partEnv: the variable name
}

// parseTemplate compiles text. An unknown placeholder, an unclosed
// brace, {secret} or {env…} inside an env name, or an empty env name is
// an error.
func parseTemplate(text string) (template, error) {
	var t template
	parts, rest, err := parseParts(text, false, &t)
	if err != nil {
		return template{}, err
	}
	if rest != "" {
		return template{}, fmt.Errorf("unexpected %q", rest)
	}
	t.parts = parts
	return t, nil
}

// parseParts reads s up to its end, or (inEnv) up to the '}' that
// closes an {env.…}, returning the parts and what follows the close.
func parseParts(s string, inEnv bool, t *template) ([]part, string, error) {
	var parts []part
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, part{kind: partText, text: lit.String()})
			lit.Reset()
		}
	}
	for len(s) > 0 {
		c := s[0]
		switch {
		case c == '}' && inEnv:
			flush()
			return parts, s[1:], nil
		case c == '}':
			return nil, "", fmt.Errorf("a '}' closes no placeholder")
		case c != '{':
			lit.WriteByte(c)
			s = s[1:]
			continue
		}
		switch {
		case strings.HasPrefix(s, "{agent}"), strings.HasPrefix(s, "{owner}"):
			flush()
			parts = append(parts, part{kind: partID, text: s[1:6]})
			s = s[7:]
		case strings.HasPrefix(s, "{secret}"):
			if inEnv {
				return nil, "", fmt.Errorf("{secret} inside an {env.…} name")
			}
			flush()
			parts = append(parts, part{kind: partSecret})
			t.usesSecret = true
			s = s[8:]
		case strings.HasPrefix(s, "{env."):
			if inEnv {
				return nil, "", fmt.Errorf("{env.…} inside an {env.…} name")
			}
			flush()
			name, rest, err := parseParts(s[5:], true, t)
			if err != nil {
				return nil, "", err
			}
			if len(name) == 0 {
				return nil, "", fmt.Errorf("an {env.…} names no variable")
			}
			for _, p := range name {
				if p.kind == partID {
					t.usesEnvPerID = true
				}
			}
			parts = append(parts, part{kind: partEnv, env: name})
			s = rest
		default:
			end := strings.IndexByte(s, '}')
			if end < 0 {
				end = len(s) - 1
			}
			return nil, "", fmt.Errorf("unknown placeholder %q (use {agent}, {owner}, {secret} or {env.NAME})", s[:end+1])
		}
	}
	if inEnv {
		return nil, "", fmt.Errorf("an {env.…} is not closed")
	}
	flush()
	return parts, "", nil
}

// expand fills the template. problem, when not empty, says why no value
// could be made (an id the caller lacks or that cannot be part of an
// environment name, an unset variable), never a secret or a variable's
// name.
func (t template) expand(ids map[string]string, secret string) (value, problem string) {
	var b strings.Builder
	for _, p := range t.parts {
		switch p.kind {
		case partText:
			b.WriteString(p.text)
		case partID:
			if ids[p.text] == "" {
				return "", "the call has no verified " + p.text
			}
			b.WriteString(ids[p.text])
		case partSecret:
			b.WriteString(secret)
		case partEnv:
			var name strings.Builder
			for _, q := range p.env {
				if q.kind == partText {
					name.WriteString(q.text)
					continue
				}
				id := ids[q.text]
				if id == "" {
					return "", "the call has no verified " + q.text
				}
				if !SafeID(id) {
					return "", "this " + q.text + " id cannot name a credential variable"
				}
				name.WriteString(id)
			}
			v, ok := os.LookupEnv(name.String())
			if !ok || v == "" {
				return "", "the gateway keeps no credential for this caller"
			}
			b.WriteString(v)
		}
	}
	return b.String(), ""
}
