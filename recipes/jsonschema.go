package recipes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// CompileSchema compiles an operator- or agent-supplied JSON Schema
// (draft 2020-12 unless the document says otherwise) held as a decoded
// JSON value. It never fetches remote references. Spec §7.1, §15.3 step 4.
func CompileSchema(doc map[string]any) (*jsonschema.Schema, error) {
	if doc == nil {
		return nil, errors.New("schema is missing")
	}
	// Round-trip through jsonschema's own decoder so numbers are json.Number.
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemoteLoader{})
	if err := c.AddResource("mem:///schema.json", v); err != nil {
		return nil, err
	}
	return c.Compile("mem:///schema.json")
}

type noRemoteLoader struct{}

func (noRemoteLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("remote schema references are not allowed: %s", url)
}

// validate checks v against s and returns human-readable violations,
// each "at /pointer: message", sorted; nil when v is valid.
func validate(s *jsonschema.Schema, v any) []string {
	if s == nil {
		return nil
	}
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{err.Error()}
	}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			out = append(out, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(out)
	return out
}

// checkObjectSchema enforces spec §7.1 on an input schema: `"type":
// "object"` and `"additionalProperties": false`.
func checkInputSchema(doc map[string]any) error {
	if t, _ := doc["type"].(string); t != "object" {
		return errors.New(`input_schema must have "type": "object"`)
	}
	if ap, ok := doc["additionalProperties"].(bool); !ok || ap {
		return errors.New(`input_schema must have "additionalProperties": false`)
	}
	return nil
}
