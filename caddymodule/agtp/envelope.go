package agtp

import (
	"slices"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/caddy-rcns/caddy-rcns/internal/jsonenc"
)

// Media types (spec §2.1, api-01 §17).
const (
	MediaAGTP     = "application/vnd.agtp+json"
	MediaManifest = "application/vnd.agtp.manifest+json"
	MediaEndpoint = "application/vnd.agtp.endpoint+json"
)

// ResponseJSON makes encoding/json/v2 write values as encoding/json.Marshal
// does (keys sorted, <>& and U+2028/2029 escaped, nil slices and maps as
// null; invalid UTF-8 becomes U+FFFD, written as the character where
// encoding/json writes \ufffd): the fallback for result values that
// jsonenc.AppendValue does not model (TestEnvelopeEncodingMatchesEncodingJSON).
var ResponseJSON = jsonv2.JoinOptions(jsonv2.Deterministic(true), jsontext.EscapeForHTML(true), jsontext.EscapeForJS(true),
	jsontext.AllowInvalidUTF8(true), jsonv2.FormatNilSliceAsNull(true), jsonv2.FormatNilMapAsNull(true))

// Encode writes the envelope as encoding/json.Marshal does (fields in
// declaration order: result, status, task_id): by hand for plain
// decoded-JSON results (jsonenc.AppendValue), through json/v2 with
// ResponseJSON for anything else. The error is json/v2's, for a result
// it cannot encode.
func (e Envelope) Encode() ([]byte, error) {
	b := make([]byte, 0, 256)
	b = append(b, `{"result":`...)
	b, ok := jsonenc.AppendValue(b, e.Result, true)
	if !ok {
		return jsonv2.Marshal(e, ResponseJSON)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	if e.TaskID != "" {
		b = append(b, `,"task_id":`...)
		b = jsonenc.AppendStringHTML(b, e.TaskID)
	}
	return append(b, '}'), nil
}

// Envelope is the AGTP success envelope (agtp-09 §6.7): a struct, so
// encoding it needs no map sorting.
type Envelope struct {
	Result any    `json:"result"`
	Status int    `json:"status"`
	TaskID string `json:"task_id,omitempty"`
}

// JSONAppender is a member value that writes its own JSON (as
// encoding/json.Marshal would, HTML-escaped), e.g. recipes.Lineage.
type JSONAppender interface {
	AppendJSON(b []byte) []byte
}

// ContractAnswer is a §13.4 contract body (461, 263, INSPECT
// target=contract): the contract's endpoint as the RFC 8785 bytes
// contract_hash covers (Endpoint), written unchanged, and every other
// member (Members: synthesis_id, status, result, task_id…) encoded as
// encoding/json would (TestContractAnswerEncoding), so the endpoint and
// its schemas are never re-scanned.
type ContractAnswer struct {
	// Members are the body's other members (not "endpoint").
	Members map[string]any
	// Endpoint is the endpoint's canonical JSON, written as is.
	Endpoint []byte
}

// Encode returns the body as encoding/json would write the members
// (keys sorted, strings HTML-escaped) with "endpoint" at its sorted
// place, its bytes unchanged. The error is json/v2's, for a member it
// cannot encode.
func (a *ContractAnswer) Encode() ([]byte, error) {
	keys := make([]string, 0, len(a.Members)+1)
	for k := range a.Members {
		keys = append(keys, k)
	}
	keys = append(keys, "endpoint")
	slices.Sort(keys)
	b := make([]byte, 0, len(a.Endpoint)+768)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendStringHTML(b, k)
		b = append(b, ':')
		if k == "endpoint" {
			b = append(b, a.Endpoint...)
			continue
		}
		mark := len(b)
		switch v := a.Members[k].(type) {
		case string:
			b = jsonenc.AppendStringHTML(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case JSONAppender:
			b = v.AppendJSON(b)
		default:
			var ok bool
			if b, ok = jsonenc.AppendValue(b, v, true); !ok {
				raw, err := jsonv2.Marshal(v, ResponseJSON)
				if err != nil {
					return nil, err
				}
				b = append(b[:mark], raw...)
			}
		}
	}
	return append(b, '}'), nil
}
