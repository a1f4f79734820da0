package recipes

// The external_service binding of a Tier B endpoint (spec §7.3): the
// upstream call it makes, built once at load.

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/caddy-rcns/caddy-rcns/policy"
	"github.com/caddy-rcns/caddy-rcns/recipes/schema"
)

type externalService struct {
	up        *Upstream
	method    string
	path      *policy.PathTemplate
	params    []string // path.Params(), once: read-only
	queryKeys []string
	query     map[string]*Expr
	body      *Expr
	headers   http.Header
	// plainHeader is the whole header of a request without a body or a
	// Traceparent (headers plus Accept), built once and shared by those
	// requests: read-only, as RoundTrip never modifies a request.
	plainHeader http.Header
	inRename    map[string]string
	outRename   map[string]string
	errorMap    map[int]string
	timeout     time.Duration
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func buildExternalService(doc *schema.Document, d *schema.ExternalServiceDoc, e *Endpoint, inputSchema map[string]any, upstreams map[string]*Upstream, unbound bool) (*externalService, error) {
	up, ok := upstreams[d.Upstream]
	if !ok && unbound {
		up, ok = unconfiguredUpstream(d.Upstream), true
	}
	if !ok {
		names := make([]string, 0, len(upstreams))
		for n := range upstreams {
			names = append(names, n)
		}
		sort.Strings(names)
		declared := "the Caddyfile declares no upstream"
		if len(names) > 0 {
			declared = "declared in the Caddyfile: " + strings.Join(names, ", ")
		}
		return nil, doc.Errorf("/external_service/upstream", "unknown upstream %q (%s)", d.Upstream, declared)
	}
	if d.Method == "" {
		return nil, doc.Errorf("/external_service", "external_service.method is required (spec §7.3)")
	}
	tmpl, err := policy.ParseRawTemplate(d.Path)
	if err != nil {
		return nil, doc.Errorf("/external_service/path", "%v", err)
	}
	if err := checkUpstreamParams(tmpl, inputSchema); err != nil {
		return nil, doc.Errorf("/external_service/path", "endpoint %s %s: %v", e.Method, e.Path, err)
	}
	s := &externalService{
		up: up, method: d.Method, path: tmpl, params: tmpl.Params(), query: map[string]*Expr{},
		headers: http.Header{}, inRename: d.InputTransform, outRename: d.OutputTransform,
		errorMap: map[int]string{}, timeout: up.Timeout,
	}
	if d.TimeoutSeconds != 0 {
		if s.timeout, err = timeoutFromSeconds(d.TimeoutSeconds); err != nil {
			return nil, doc.Errorf("/external_service/timeout_seconds", "endpoint %s %s: %v", e.Method, e.Path, err)
		}
	}
	for k, src := range d.Query {
		x, err := CompileExpr(src, nil)
		if err != nil {
			return nil, doc.Errorf("/external_service/query/"+k, "%v", err)
		}
		s.query[k] = x
		s.queryKeys = append(s.queryKeys, k)
	}
	sort.Strings(s.queryKeys)
	if d.Body != "" {
		if s.body, err = CompileExpr(d.Body, nil); err != nil {
			return nil, doc.Errorf("/external_service/body", "%v", err)
		}
	}
	for k, v := range d.Headers {
		var missing []string
		val := envRef.ReplaceAllStringFunc(v, func(m string) string {
			name := envRef.FindStringSubmatch(m)[1]
			x, ok := os.LookupEnv(name)
			if !ok {
				missing = append(missing, name)
			}
			return x
		})
		if len(missing) > 0 {
			return nil, doc.Errorf("/external_service/headers/"+k, "environment variable %s is not set (spec §7.3: unresolved ${VAR} fails registration)", strings.Join(missing, ", "))
		}
		if forbiddenUpstreamHeader(k) {
			return nil, doc.Errorf("/external_service/headers/"+k, "header %s is managed by the gateway and cannot be configured", k)
		}
		if !httpguts.ValidHeaderFieldValue(val) {
			// The value is not quoted: it may be a secret from ${VAR}.
			from := ""
			if envRef.MatchString(v) {
				from = " once its ${VAR} references are resolved"
			}
			return nil, doc.Errorf("/external_service/headers/"+k, "the value of header %s%s carries a control character (CR, LF, NUL, DEL or another below 0x20 but tab): a header value is visible characters, spaces and tabs (RFC 9110 §5.5)", k, from)
		}
		s.headers.Set(k, val)
	}
	for code, name := range d.ErrorMap {
		n, err := strconv.Atoi(code)
		if err != nil || n < 100 || n > 599 {
			return nil, doc.Errorf("/external_service/error_map/"+code, "error_map key %q is not an HTTP status", code)
		}
		if !e.errors[name] {
			return nil, doc.Errorf("/external_service/error_map/"+code, "error_map names %q, which is not listed in errors (spec §7.3)", name)
		}
		s.errorMap[n] = name
	}
	s.plainHeader = s.headers.Clone()
	s.plainHeader["Accept"] = mediaJSONValue
	return s, nil
}

// checkUpstreamParams requires every {name} of the upstream path
// template to be a property of the input schema listed in its top-level
// required: the value of each comes from the validated input, so a
// parameter the schema lets an agent (or a recipe step's mapping) leave
// out would fail every such call with a 422 invalid-input that blames a
// caller who followed the published schema. A name matched only by
// patternProperties, or required only inside allOf/if/then, does not
// count (docs/configuration.md, external_service.path).
func checkUpstreamParams(tmpl *policy.PathTemplate, inputSchema map[string]any) error {
	props, _ := inputSchema["properties"].(map[string]any)
	required := map[string]bool{}
	if list, ok := inputSchema["required"].([]any); ok {
		for _, r := range list {
			if name, ok := r.(string); ok {
				required[name] = true
			}
		}
	}
	for _, p := range tmpl.Params() {
		if _, ok := props[p]; !ok {
			return fmt.Errorf("upstream path parameter {%s} is not a property of input_schema (each {name} in external_service.path is filled from the input)", p)
		}
		if !required[p] {
			return fmt.Errorf("upstream path parameter {%s} must be listed in input_schema.required (a call without it could not build the upstream path)", p)
		}
	}
	return nil
}

// timeoutFromSeconds converts a document's timeout_seconds to a
// time.Duration. It refuses a value outside MinCallTimeout to
// MaxCallTimeout (and NaN) before converting, so the conversion can
// neither overflow (1e12 s) nor truncate to zero (1e-10 s).
func timeoutFromSeconds(sec float64) (time.Duration, error) {
	if !(sec >= MinCallTimeout.Seconds() && sec <= MaxCallTimeout.Seconds()) {
		return 0, fmt.Errorf("timeout_seconds %g is outside the allowed range %g to %g (%v to %v)",
			sec, MinCallTimeout.Seconds(), MaxCallTimeout.Seconds(), MinCallTimeout, MaxCallTimeout)
	}
	return time.Duration(math.Round(sec * float64(time.Second))), nil
}

func forbiddenUpstreamHeader(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Content-Type":
		return true
	}
	return false
}
