package openapi

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

// DefaultScopesExtension is the operation extension that lists an
// operation's required scopes when Options.ScopesExtension is empty:
//
//	x-rcns-scopes: [hotel:read]
const DefaultScopesExtension = "x-rcns-scopes"

// defaultMethodMap is the AGTP method each HTTP method of an operation
// becomes by default (the catalog's legacy aliases, RCNS §5.4). HEAD and OPTIONS
// operations are imported only when Options.MethodMap names a method for
// them; TRACE never is (no endpoint can call it upstream).
var defaultMethodMap = map[string]string{
	http.MethodGet:    "FETCH",
	http.MethodPost:   "CREATE",
	http.MethodPut:    "REPLACE",
	http.MethodPatch:  "MODIFY",
	http.MethodDelete: "REMOVE",
}

// Options are the choices of one import. Only Upstream is required.
type Options struct {
	// Source names the OpenAPI document in errors and in the comment
	// heading each generated file (usually the path as given).
	Source string
	// Upstream is the name of the Caddyfile `upstream` every generated
	// endpoint calls (external_service.upstream).
	Upstream string

	// Tags selects the operations carrying at least one of these tags.
	Tags []string
	// OperationIDs selects the operations with one of these operationIds.
	OperationIDs []string
	// Paths selects the operations whose path template matches one of
	// these globs (path.Match: "*" matches within one segment, so
	// "/pet/*" matches /pet/{petId} but not /pet/{petId}/uploadImage).
	// Selections of different kinds must all hold; an empty one selects
	// every operation.
	Paths []string

	// MethodMap overrides the default mapping (GET→FETCH, POST→CREATE,
	// PUT→REPLACE, PATCH→MODIFY, DELETE→REMOVE) per HTTP method
	// (upper-case key, e.g. "POST": "SUBMIT"); HEAD and OPTIONS
	// operations are imported only when it maps them. Each value must be a catalog method
	// and not a legacy verb.
	MethodMap map[string]string
	// QueryForSearch maps a GET operation that declares query
	// parameters (a search or a filtered list) to QUERY instead of
	// MethodMap["GET"].
	QueryForSearch bool

	// AcceptRenames accepts every AGTP path the import proposes for an
	// operation whose path has a segment equal to a method name (RCNS
	// §6). Without it (or an entry in Overrides) such an operation is
	// refused.
	AcceptRenames bool
	// Overrides sets the AGTP method, path or scopes of single
	// operations, keyed by operationId or, for an operation without
	// one, by "METHOD /path" as the document writes it (LoadOverrides
	// reads them from a map file).
	Overrides map[string]Override

	// Scopes are required of every endpoint (required_scopes), in
	// addition to those the operation's ScopesExtension lists.
	Scopes []string
	// ScopesExtension names the operation extension listing required
	// scopes; "" means DefaultScopesExtension.
	ScopesExtension string
	// ScopesFromSecurity adds the OAuth2 / OpenID Connect scopes of the
	// security requirement the import applies to an operation, when
	// they are valid scope tokens (a:b).
	ScopesFromSecurity bool

	// Headers are sent upstream by every endpoint (name → value; a value
	// may read an environment variable as ${NAME}, resolved when the
	// configuration loads). A required header parameter of an operation
	// is met by a header of the same name here.
	Headers map[string]string
	// TimeoutSeconds sets external_service.timeout_seconds on every
	// endpoint; 0 leaves it out (the upstream's timeout applies).
	TimeoutSeconds float64
}

// Override is one operation's entry in a map file.
type Override struct {
	// Method is the AGTP method, replacing the one the HTTP method maps
	// to.
	Method string `yaml:"method"`
	// Path is the AGTP path template, replacing the one the import
	// proposes; its {name} parameters are the operation's path
	// parameters (names reduced to A-Z a-z 0-9 _).
	Path string `yaml:"path"`
	// Scopes are required of this endpoint, in addition to
	// Options.Scopes and the operation's scopes extension.
	Scopes []string `yaml:"scopes"`
}

// mapFile is the document LoadOverrides reads.
type mapFile struct {
	Operations map[string]Override `yaml:"operations"`
}

// LoadOverrides reads a map file: a YAML document with one key,
// operations, mapping an operationId (or "METHOD /path") to an
// Override:
//
//	operations:
//	  placeOrder: {method: ORDER, path: /store/orders}
//	  "GET /store/inventory": {path: /store/stock, scopes: [store:read]}
//
// Unknown keys and duplicate entries are errors naming the file.
func LoadOverrides(file string) (map[string]Override, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &Error{File: file, Message: fmt.Sprintf("cannot read the map file: %v", unwrapPath(err))}
	}
	var m mapFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, &Error{File: file, Message: "invalid map file: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if m.Operations == nil {
		m.Operations = map[string]Override{}
	}
	return m.Operations, nil
}

// checkOptions validates the options that do not depend on the
// document.
func checkOptions(o *Options, mp *policy.MethodPolicy, errs *errorList) {
	if o.Upstream == "" {
		errs.add("", "", "no upstream: give the name of the Caddyfile upstream the endpoints call (--upstream NAME)")
	} else if !schema.ValidUpstreamName(o.Upstream) {
		errs.add("", "", "upstream %q: the name must match %s, as a Caddyfile upstream name does", o.Upstream, schema.UpstreamNamePattern())
	}
	for _, k := range sortedKeys(o.MethodMap) {
		v := o.MethodMap[k]
		if !slices.Contains([]string{"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS"}, k) {
			errs.add("", "", "method map %s=%s: %s is not an HTTP method an endpoint can call (GET PUT POST DELETE PATCH HEAD OPTIONS)", k, v, k)
			continue
		}
		if msg := checkAGTPMethod(mp, v); msg != "" {
			errs.add("", "", "method map %s=%s: %s", k, v, msg)
		}
	}
	for _, s := range o.Scopes {
		if _, err := policy.ParseScope(s); err != nil {
			errs.add("", "", "scope %q: %v", s, err)
		}
	}
	for _, k := range sortedKeys(o.Headers) {
		if !headerName(k) {
			errs.add("", "", "header %q: not a valid header name", k)
		} else if managedHeader(k) {
			errs.add("", "", "header %s is set by the gateway and cannot be configured", k)
		}
	}
	if o.TimeoutSeconds != 0 && (o.TimeoutSeconds < schema.MinTimeoutSeconds || o.TimeoutSeconds > schema.MaxTimeoutSeconds) {
		errs.add("", "", "timeout %g s is outside %g to %g s", o.TimeoutSeconds, schema.MinTimeoutSeconds, float64(schema.MaxTimeoutSeconds))
	}
	for _, g := range o.Paths {
		if _, err := path.Match(g, "/"); err != nil {
			errs.add("", "", "path glob %q: %v", g, err)
		}
	}
	for _, k := range sortedKeys(o.Overrides) {
		ov := o.Overrides[k]
		if ov.Method != "" {
			if msg := checkAGTPMethod(mp, ov.Method); msg != "" {
				errs.add("", "", "map entry %q: method %s: %s", k, ov.Method, msg)
			}
		}
		for _, s := range ov.Scopes {
			if _, err := policy.ParseScope(s); err != nil {
				errs.add("", "", "map entry %q: scope %q: %v", k, s, err)
			}
		}
	}
}

// checkAGTPMethod returns why m cannot be an endpoint's method, or "".
func checkAGTPMethod(mp *policy.MethodPolicy, m string) string {
	if slices.Contains(policy.LegacyVerbs(), m) {
		return "a legacy verb cannot be an endpoint's method; give its AGTP method (GET→FETCH, POST→CREATE, …)"
	}
	if !mp.IsMethod(m) {
		return fmt.Sprintf("not a method of the catalog %s (custom methods must be declared in the Caddyfile first; give a catalog method here)", mp.Catalog.Version())
	}
	return ""
}

// headerName reports whether k is an RFC 9110 field name.
func headerName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// managedHeader reports whether the gateway sets header k itself, so no
// endpoint may configure it.
func managedHeader(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Content-Type", "Accept", "Traceparent":
		return true
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
