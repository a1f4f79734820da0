package upstreamauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"
)

// MaxSecretFileBytes bounds a per-id secret file of a Dir source
// (64 KiB); a longer file is refused as unavailable
// (ReasonCredentialUnavailable).
const MaxSecretFileBytes = 64 << 10

// MaxMappingFileBytes bounds a mapping File (16 MiB).
const MaxMappingFileBytes = 16 << 20

// PerCallerConfig configures a per_agent or per_owner policy. Exactly
// one source: Dir, File, or neither (then every Header template reads
// the secret from the environment through {env.NAME}).
type PerCallerConfig struct {
	// Upstream is the upstream's name, for refusals.
	Upstream string
	// Kind is KindPerAgent (keyed by the verified Agent-ID) or
	// KindPerOwner (keyed by the verified owner).
	Kind Kind
	// Header maps header names to value templates. A template is text
	// with placeholders: {agent} (the verified Agent-ID), {owner} (the
	// verified owner), {secret} (the id's secret from Dir or File) and
	// {env.NAME} (the gateway's environment variable NAME, read at call
	// time; NAME may contain {agent} or {owner}, e.g.
	// {env.HOTEL_TOKEN_{agent}}). Empty with Dir or File: Authorization
	// "Bearer {secret}".
	Header map[string]string
	// Dir is a directory holding one file per id, named by the id
	// (Agent-ID or owner id); the file's content, without surrounding
	// white space, is {secret}. Read at call time, so a changed file
	// applies to the next call.
	Dir string
	// File is a mapping file (YAML or JSON object) read once when the
	// policy is built (each config load): id → secret string (the
	// {secret} of the Header templates), or id → object of header name →
	// value (these headers, set as they are).
	File string
}

// PerCaller is the per_agent or per_owner policy: the credential of
// the pair (upstream, agent) or (upstream, owner) from a source the
// operator controls, never from the agent's request.
type PerCaller struct {
	upstream string
	kind     Kind
	header   []headerTemplate
	dir      string
	mapping  map[string]mappingEntry // nil without File
}

type headerTemplate struct {
	name string
	tmpl template
}

type mappingEntry struct {
	secret string
	header http.Header // nil for a secret string
}

// NewPerCaller checks cfg, compiles its templates and, with File,
// reads and checks the mapping file. Errors name the upstream and the
// problem (bad kind, no or two sources, an unknown placeholder, a
// template without {secret} or {env…} naming no secret, an unreadable
// or malformed mapping, an invalid header value), never a secret.
func NewPerCaller(cfg PerCallerConfig) (*PerCaller, error) {
	p := &PerCaller{upstream: cfg.Upstream, kind: cfg.Kind, dir: cfg.Dir}
	if cfg.Kind != KindPerAgent && cfg.Kind != KindPerOwner {
		return nil, fmt.Errorf("upstream %s: credentials kind %q is neither %s nor %s", cfg.Upstream, cfg.Kind, KindPerAgent, KindPerOwner)
	}
	if cfg.Dir != "" && cfg.File != "" {
		return nil, fmt.Errorf("upstream %s: credentials %s: dir and file are exclusive", cfg.Upstream, cfg.Kind)
	}
	header := cfg.Header
	if len(header) == 0 {
		if cfg.Dir == "" && cfg.File == "" {
			return nil, fmt.Errorf("upstream %s: credentials %s needs a source: dir, file, or header templates reading {env.NAME}", cfg.Upstream, cfg.Kind)
		}
		header = map[string]string{"Authorization": "Bearer {secret}"}
	}
	for name, text := range header {
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("upstream %s: credentials %s: %q is not a header name", cfg.Upstream, cfg.Kind, name)
		}
		t, err := parseTemplate(text)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: credentials %s: header %s: %v", cfg.Upstream, cfg.Kind, name, err)
		}
		if t.usesSecret && cfg.Dir == "" && cfg.File == "" {
			return nil, fmt.Errorf("upstream %s: credentials %s: header %s uses {secret} but no dir or file is configured", cfg.Upstream, cfg.Kind, name)
		}
		if cfg.Dir == "" && cfg.File == "" && !t.usesEnvPerID {
			return nil, fmt.Errorf("upstream %s: credentials %s: header %s reads no per-caller secret (use {env.NAME} with {agent} or {owner} in NAME, or a dir or file)", cfg.Upstream, cfg.Kind, name)
		}
		p.header = append(p.header, headerTemplate{name: http.CanonicalHeaderKey(name), tmpl: t})
	}
	if cfg.Dir != "" {
		st, err := os.Stat(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: credentials %s: dir: %v", cfg.Upstream, cfg.Kind, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("upstream %s: credentials %s: dir %s is not a directory", cfg.Upstream, cfg.Kind, cfg.Dir)
		}
	}
	if cfg.File != "" {
		m, err := readMapping(cfg.File)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: credentials %s: file %s: %v", cfg.Upstream, cfg.Kind, cfg.File, err)
		}
		p.mapping = m
	}
	return p, nil
}

// Kind is the policy's kind (KindPerAgent or KindPerOwner).
func (p *PerCaller) Kind() Kind { return p.kind }

// Resolve returns the caller's credential: the Header templates filled
// with the caller's ids and secret. It refuses with
// ReasonCredentialMissing (424) when the caller has no verified id of
// the policy's kind, the id is not usable as a key (a Dir or {env…}
// lookup takes only 1..256 of ALPHA, DIGIT, '-', '_', ':', '.', and
// never "."/".."), or no secret is kept for it (no file of that name in
// Dir, no entry in File). A Dir source that cannot be read (the
// directory missing or unreadable, the id's file unreadable, empty or
// over MaxSecretFileBytes) is refused with ReasonCredentialUnavailable
// (503, Retry-After), its Cause naming the path and error.
func (p *PerCaller) Resolve(_ context.Context, c Caller, _ []string) (Credential, *Refusal) {
	key, who := c.AgentID, "agent"
	if p.kind == KindPerOwner {
		key, who = c.OwnerID, "owner"
	}
	if key == "" {
		return Credential{}, p.missing("the call has no verified %s (an owner comes from the OAuth token's sub, the agent document's owner, or an Owner-ID covered by the request's signature)", who)
	}
	var secret string
	if p.mapping != nil {
		e, ok := p.mapping[key]
		if !ok {
			return Credential{}, p.missing("the gateway keeps no credential for this %s", who)
		}
		if e.header != nil {
			return Credential{Header: e.header.Clone(), Kind: p.kind}, nil
		}
		secret = e.secret
	} else if p.dir != "" {
		if !SafeID(key) {
			return Credential{}, p.missing("this %s id cannot name a credential file", who)
		}
		s, err := readSecretFile(p.dir, key)
		if errors.Is(err, errNoSecretFile) {
			return Credential{}, p.missing("the gateway keeps no credential for this %s", who)
		}
		if err != nil {
			return Credential{}, p.unavailable(err)
		}
		secret = s
	}
	ids := map[string]string{"agent": c.AgentID, "owner": c.OwnerID}
	h := make(http.Header, len(p.header))
	for _, ht := range p.header {
		v, problem := ht.tmpl.expand(ids, secret)
		if problem != "" {
			return Credential{}, p.missing("%s", problem)
		}
		if v == "" || !httpguts.ValidHeaderFieldValue(v) {
			return Credential{}, p.missing("the credential kept for this %s is not a usable %s header value", who, ht.name)
		}
		h[ht.name] = []string{v}
	}
	return Credential{Header: h, Kind: p.kind}, nil
}

func (p *PerCaller) missing(format string, args ...any) *Refusal {
	return &Refusal{Upstream: p.upstream, Reason: ReasonCredentialMissing, Status: StatusCredentialMissing,
		Explanation: fmt.Sprintf("upstream %s (credentials %s): ", p.upstream, p.kind) + fmt.Sprintf(format, args...)}
}

// unavailable is 503 upstream-credential-unavailable: the source
// cannot be read. The explanation names the upstream only; cause (path
// and error, never the secret) is for the log.
func (p *PerCaller) unavailable(cause error) *Refusal {
	return &Refusal{Upstream: p.upstream, Reason: ReasonCredentialUnavailable, Status: StatusCredentialUnavailable,
		RetryAfter: CredentialUnavailableRetryAfter, Cause: cause.Error(),
		Explanation: fmt.Sprintf("upstream %s (credentials %s): the gateway cannot read its credential store at the moment (the operator is told)", p.upstream, p.kind)}
}

// SafeID reports whether id may name a file in a credential directory
// or part of an environment variable name: 1..256 bytes of ALPHA,
// DIGIT, '-', '_', ':' and '.', and no "..". Agent-IDs (hex) and
// Owner-IDs (spec §3) always are; an OAuth sub may not be.
func SafeID(id string) bool {
	if len(id) < 1 || len(id) > 256 || id == "." || strings.Contains(id, "..") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == ':', c == '.':
		default:
			return false
		}
	}
	return true
}

// errNoSecretFile: the directory is there and holds no file for the
// id; the one outcome of readSecretFile that is the caller's, not the
// operator's.
var errNoSecretFile = errors.New("no credential file for this id")

// readSecretFile reads dir/id through an os.Root, so neither the id
// nor a symbolic link inside dir can reach a file outside it. The error
// is errNoSecretFile when dir is readable and holds no file id, else
// (dir missing or unreadable, the file unreadable, not a regular file,
// empty or over MaxSecretFileBytes) an error naming the path and the
// problem, never the content.
func readSecretFile(dir, id string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("credential dir: %w", err)
	}
	defer root.Close()
	f, err := root.Open(id)
	if errors.Is(err, fs.ErrNotExist) {
		// The id's own file is absent, and the directory is still
		// there (not removed since it was opened).
		if _, serr := root.Stat("."); serr != nil {
			return "", fmt.Errorf("credential dir %s: %w", dir, serr)
		}
		return "", errNoSecretFile
	}
	path := filepath.Join(dir, id)
	if err != nil {
		return "", fmt.Errorf("credential file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("credential file %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("credential file %s is not a regular file (%s)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("credential file %s: %w", path, err)
	}
	if len(b) > MaxSecretFileBytes {
		return "", fmt.Errorf("credential file %s is larger than %d bytes", path, MaxSecretFileBytes)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("credential file %s is empty", path)
	}
	return s, nil
}

func readMapping(path string) (map[string]mappingEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no such file")
		}
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxMappingFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxMappingFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxMappingFileBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not YAML or JSON (%v)", redactYAMLError(err))
	}
	if len(doc.Content) == 0 {
		return map[string]mappingEntry{}, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the document is not an object of id → secret", top.Line)
	}
	out := make(map[string]mappingEntry, len(top.Content)/2)
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return nil, fmt.Errorf("line %d: an id is not a non-empty string", k.Line)
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("line %d: id %q appears twice", k.Line, k.Value)
		}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Value == "" || !httpguts.ValidHeaderFieldValue(v.Value) {
				return nil, fmt.Errorf("line %d: the secret of id %q is empty or not a header value", v.Line, k.Value)
			}
			out[k.Value] = mappingEntry{secret: v.Value}
		case yaml.MappingNode:
			h := make(http.Header, len(v.Content)/2)
			for j := 0; j+1 < len(v.Content); j += 2 {
				hn, hv := v.Content[j], v.Content[j+1]
				if hn.Kind != yaml.ScalarNode || !httpguts.ValidHeaderFieldName(hn.Value) {
					return nil, fmt.Errorf("line %d: id %q: %q is not a header name", hn.Line, k.Value, hn.Value)
				}
				if hv.Kind != yaml.ScalarNode || hv.Value == "" || !httpguts.ValidHeaderFieldValue(hv.Value) {
					return nil, fmt.Errorf("line %d: id %q: header %s is empty or not a header value", hv.Line, k.Value, hn.Value)
				}
				h.Set(hn.Value, hv.Value)
			}
			if len(h) == 0 {
				return nil, fmt.Errorf("line %d: id %q maps to no header", v.Line, k.Value)
			}
			out[k.Value] = mappingEntry{header: h}
		default:
			return nil, fmt.Errorf("line %d: id %q maps to neither a secret string nor an object of headers", v.Line, k.Value)
		}
	}
	return out, nil
}

// redactYAMLError keeps a YAML syntax error's position and drops any
// quoted text, which may be part of a secret.
func redactYAMLError(err error) string {
	msg := err.Error()
	if i := strings.IndexAny(msg, "`'\""); i >= 0 {
		msg = strings.TrimSpace(msg[:i]) + " …"
	}
	return msg
}

var _ Policy = (*PerCaller)(nil)
