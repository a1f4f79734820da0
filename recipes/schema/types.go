package schema

// The typed documents below mirror the embedded schemas field for field;
// the json tags are the YAML keys. Fill them with Document.Decode after
// Parse has validated the document. An optional field left out decodes
// to its zero value (nil for pointers, maps and slices).

// AgentDoc is an agent document (agent.schema.json; docs/configuration.md,
// Agent).
type AgentDoc struct {
	// AgentID is the canonical Agent-ID: 64 lower-case hex digits (RCNS §3).
	AgentID string `json:"agent_id"`
	// Name names the agent in logs and listings.
	Name string `json:"name"`
	// OwnerID is the agent's Owner-ID (RCNS §3).
	OwnerID string `json:"owner_id"`
	// TrustTier is 1 (verified) to 3 (experimental); RCNS lock 4.
	TrustTier int `json:"trust_tier"`
	// Status is "active", "deprecated", "suspended" or "retired"; ""
	// (omitted) means "active".
	Status string `json:"status,omitempty"`
	// Scopes are the granted Authority-Scope tokens; may be empty.
	Scopes []string `json:"scopes,omitempty"`
	// Certificates are lowercase hex SHA-256 digests of the DER
	// SubjectPublicKeyInfo of the client certificates the agent may
	// present (identity mtls); a renewal with the same key keeps working.
	Certificates []string `json:"certificates,omitempty"`
	// Keys are the public JWKs (OKP Ed25519, EC P-256) the agent signs
	// requests with (identity signature, RFC 9421); their RFC 7638
	// thumbprints are the keyids.
	Keys []map[string]any `json:"keys,omitempty"`
	// OAuthClients are the OAuth client ids (an access token's
	// client_id, else azp) that act as this agent under identity oauth;
	// a client id names one agent.
	OAuthClients []string `json:"oauth_clients,omitempty"`
}

// SemanticDoc is the semantic block of an endpoint (RCNS §7.2): all seven
// fields are required.
type SemanticDoc struct {
	// Intent is one imperative sentence.
	Intent string `json:"intent"`
	// Actor is a free string (agent, human, system, …); never an enum.
	Actor string `json:"actor"`
	// Outcome is the post-condition.
	Outcome string `json:"outcome"`
	// Capability is one of Capabilities.
	Capability string `json:"capability"`
	// Confidence is in [0, 1].
	Confidence float64 `json:"confidence"`
	// Impact is one of Impacts.
	Impact string `json:"impact"`
	// IsIdempotent tells whether a retry without Idempotency-Key is safe.
	IsIdempotent bool `json:"is_idempotent"`
}

// SuccessorDoc names the (method, path) that replaces a deprecated
// endpoint.
type SuccessorDoc struct {
	Method string `json:"method"` // AGTP method
	Path   string `json:"path"`   // AGTP path template
}

// DeprecatedDoc is an endpoint's deprecation notice (RCNS §7.1).
type DeprecatedDoc struct {
	// DeprecatedIn is the version that deprecated the endpoint (required).
	DeprecatedIn string `json:"deprecated_in"`
	// RemovedIn is the version that removes it; "" if not planned.
	RemovedIn string `json:"removed_in,omitempty"`
	// Successor is the replacement, or nil.
	Successor *SuccessorDoc `json:"successor,omitempty"`
}

// ExternalServiceDoc binds a Tier B endpoint to one call on a named
// upstream (RCNS §7.3 external_service; the upstream is a Caddyfile
// `upstream` name instead of a URL).
type ExternalServiceDoc struct {
	// Upstream is the name of a Caddyfile `upstream`.
	Upstream string `json:"upstream"`
	// Method is the HTTP method: GET POST PUT PATCH DELETE HEAD OPTIONS.
	Method string `json:"method"`
	// Path is the upstream path template over the input fields; each
	// value is escaped as one segment. Each {name} must be a property of
	// the endpoint's input_schema listed in its required (package recipes
	// checks this at load).
	Path string `json:"path"`
	// Query maps a query parameter to a jq expression over the input.
	Query map[string]string `json:"query,omitempty"`
	// Body is a jq expression over the input; "" (omitted) means the
	// default: for POST, PUT and PATCH the input minus path parameters.
	Body string `json:"body,omitempty"`
	// Headers are sent upstream; values may use ${ENV_VAR}, resolved at
	// load.
	Headers map[string]string `json:"headers,omitempty"`
	// InputTransform renames AGTP fields to upstream fields; unmapped
	// fields pass.
	InputTransform map[string]string `json:"input_transform,omitempty"`
	// OutputTransform renames upstream fields to AGTP fields; unmapped
	// fields pass.
	OutputTransform map[string]string `json:"output_transform,omitempty"`
	// ErrorMap maps an upstream status ("404") to a name from the
	// endpoint's errors.
	ErrorMap map[string]string `json:"error_map,omitempty"`
	// TimeoutSeconds is the per-call timeout in seconds, from
	// MinTimeoutSeconds to MaxTimeoutSeconds; 0 (omitted) means the
	// upstream's timeout.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// The bounds of external_service.timeout_seconds (endpoint.schema.json
// says the same; docs/configuration.md): 1 ms to 1 h. A value outside
// them is refused at load, never converted to a time.Duration (1e12
// seconds would overflow it; 1e-10 would truncate to 0).
const (
	// MinTimeoutSeconds is the smallest timeout_seconds: 0.001 (1 ms).
	MinTimeoutSeconds = 0.001
	// MaxTimeoutSeconds is the largest timeout_seconds: 3600 (1 h).
	MaxTimeoutSeconds = 3600
)

// EndpointDoc is a Tier B endpoint document (endpoint.schema.json; RCNS
// §7.1).
type EndpointDoc struct {
	// Method is the AGTP method (catalog or custom, never a legacy verb).
	Method string `json:"method"`
	// Path is the AGTP path template; {name} whole segments only.
	Path string `json:"path"`
	// Description says what the endpoint does.
	Description string `json:"description"`
	// Semantic is the semantic block.
	Semantic SemanticDoc `json:"semantic"`
	// InputSchema is the user's JSON Schema 2020-12 for the input.
	InputSchema map[string]any `json:"input_schema"`
	// OutputSchema is the user's JSON Schema 2020-12 for the result.
	OutputSchema map[string]any `json:"output_schema"`
	// Errors are the named errors; they include the five upstream_* codes.
	Errors []string `json:"errors"`
	// RequiredScopes are the scopes a caller must hold; nil = none.
	RequiredScopes []string `json:"required_scopes,omitempty"`
	// Internal marks an endpoint usable only as a recipe step.
	Internal bool `json:"internal,omitempty"`
	// MaxResultBytes overrides the MCP door's max_result_bytes for this
	// endpoint's tool (bytes, at least 256); 0 keeps the door's.
	MaxResultBytes int64 `json:"max_result_bytes,omitempty"`
	// Deprecated is the deprecation notice, or nil.
	Deprecated *DeprecatedDoc `json:"deprecated,omitempty"`
	// ExternalService is the upstream binding (always set after Parse).
	ExternalService *ExternalServiceDoc `json:"external_service"`
}

// PatternDoc is the (method, path) pattern a recipe serves: exactly one
// of PathExact and PathRegex is set.
type PatternDoc struct {
	// Method is the AGTP method.
	Method string `json:"method"`
	// PathExact is an exact AGTP path, or "".
	PathExact string `json:"path_exact,omitempty"`
	// PathRegex is an RE2 expression matched against the whole path, or "".
	PathRegex string `json:"path_regex,omitempty"`
}

// RecipeEndpointDoc is the endpoint a recipe synthesizes.
type RecipeEndpointDoc struct {
	// Description says what the synthesized endpoint does.
	Description string `json:"description"`
	// Semantic is its semantic block.
	Semantic SemanticDoc `json:"semantic"`
	// InputSchema is the user's JSON Schema 2020-12 for the input.
	InputSchema map[string]any `json:"input_schema"`
	// OutputSchema is the user's JSON Schema 2020-12 for the result.
	OutputSchema map[string]any `json:"output_schema"`
	// Errors are the named errors; they include composition_failed.
	Errors []string `json:"errors"`
	// RequiredScopes are the endpoint's own required scopes; nil = none.
	RequiredScopes []string `json:"required_scopes,omitempty"`
}

// StepDoc is one recipe step: a call of a registered Tier B endpoint.
type StepDoc struct {
	// Name is [a-z][a-z0-9_]*, not "input"; later steps read its output
	// as $<name>.
	Name string `json:"name"`
	// Method is the endpoint's AGTP method.
	Method string `json:"method"`
	// Path is the endpoint's path template, exactly as declared.
	Path string `json:"path"`
	// Input is a jq expression building the step's input from $input
	// and earlier steps' $<name>.
	Input string `json:"input"`
}

// RecipeDoc is a Tier C recipe document (recipe.schema.json; RCNS §13.1).
type RecipeDoc struct {
	// Name is [a-z0-9][a-z0-9-]*.
	Name string `json:"name"`
	// Version is opaque (RCNS §13.1); always a string.
	Version string `json:"version"`
	// Description is optional.
	Description string `json:"description,omitempty"`
	// RequiredScopes is the composite scope the caller must hold.
	RequiredScopes []string `json:"required_scopes,omitempty"`
	// Propose tells whether PROPOSE may synthesize the recipe; nil means
	// true.
	Propose *bool `json:"propose,omitempty"`
	// Pattern is the (method, path) the recipe serves.
	Pattern PatternDoc `json:"pattern"`
	// Endpoint is the synthesized endpoint.
	Endpoint RecipeEndpointDoc `json:"endpoint"`
	// Steps are the calls, at least one.
	Steps []StepDoc `json:"steps"`
	// Output is a jq expression over $input and the steps' $<name>
	// building the result.
	Output string `json:"output"`
}
