package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// validateCaddyfile adapts an rcns block with body inside (records_dir
// off) and loads the result as `caddy validate` does: every module
// provisioned and validated, nothing started. An adapter error is
// returned as it is.
func validateCaddyfile(t *testing.T, body string) error {
	t.Helper()
	src := ":8080 {\n\trcns {\n\t\trecords_dir off\n\t\t" + body + "\n\t}\n}\n"
	raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return err
	}
	return validateJSON(t, raw)
}

// validateHandlerJSON loads a config whose one route is the rcns handler
// with the given JSON members (records_dir off), as `caddy validate`
// does with a JSON config.
func validateHandlerJSON(t *testing.T, members string) error {
	t.Helper()
	if members != "" {
		members = "," + members
	}
	raw := `{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"rcns","records_dir":"off"` + members + `}]}]}}}}}`
	return validateJSON(t, []byte(raw))
}

func validateJSON(t *testing.T, raw []byte) error {
	t.Helper()
	var cfg caddy.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("config JSON: %v\n%s", err, raw)
	}
	cfg.Admin = &caddy.AdminConfig{Disabled: true}
	return caddy.Validate(&cfg)
}

// configCase is one configuration checked both ways: as Caddyfile lines
// and as the handler's JSON members. want is empty for a config that
// must load, else a fragment of the error.
type configCase struct {
	name, caddyfile, json, want string
}

func runConfigCases(t *testing.T, cases []configCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(how string, err error) {
				t.Helper()
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("%s: refused a valid config: %v", how, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s: err = %v, want it to mention %q", how, err, tc.want)
				case err != nil && strings.Contains(err.Error(), "rcns: rcns: ") || err != nil && strings.Contains(err.Error(), "invalid configuration: rcns: "):
					// Caddy names the module before the error: the
					// gateway's own "rcns: " is dropped (moduleError).
					t.Errorf("%s: err = %v: rcns named twice", how, err)
				}
			}
			if tc.caddyfile != "" {
				check("Caddyfile", validateCaddyfile(t, tc.caddyfile))
			}
			if tc.json != "" {
				check("JSON", validateHandlerJSON(t, tc.json))
			}
		})
	}
}

// TestPassthroughMethodsValidated: passthrough_methods takes method
// tokens, checked like allow and disallow.
func TestPassthroughMethodsValidated(t *testing.T) {
	runConfigCases(t, []configCase{
		{"custom method", "passthrough_methods PURGE FETCH", `"passthrough_methods":["PURGE","FETCH"]`, ""},
		{"lower case", "passthrough_methods fetch", `"passthrough_methods":["fetch"]`, `passthrough_methods[0] "fetch" does not match ^[A-Z]+$ with length 3..32`},
		{"digits", "passthrough_methods PURGE 12", `"passthrough_methods":["PURGE","12"]`, `passthrough_methods[1] "12"`},
		{"too short", "passthrough_methods GO", `"passthrough_methods":["GO"]`, `passthrough_methods[0] "GO"`},
		{"allow lower case (the same rule)", "allow fetch", `"allow":["fetch"]`, `allow[0] "fetch" does not match ^[A-Z]+$ with length 3..32`},
	})
}

// TestPerAgentBounds: a per-agent bound above the total it is part of
// (given, or its default) is refused; a total set below the default
// per-agent bound is accepted (the total then binds first).
func TestPerAgentBounds(t *testing.T) {
	runConfigCases(t, []configCase{
		{"contracts equal", "max_contracts 10\n\t\tmax_contracts_per_agent 10", `"max_contracts":10,"max_contracts_per_agent":10`, ""},
		{"contracts per agent above total", "max_contracts 5\n\t\tmax_contracts_per_agent 10", `"max_contracts":5,"max_contracts_per_agent":10`,
			"max_contracts_per_agent 10 is above max_contracts 5"},
		{"contracts per agent above default total", "max_contracts_per_agent 200000", `"max_contracts_per_agent":200000`,
			"max_contracts_per_agent 200000 is above the default max_contracts 100000; set max_contracts to at least 200000"},
		{"contracts total below default per agent", "max_contracts 50", `"max_contracts":50`, ""},
		{"idempotency equal", "idempotency_max_records 100\n\t\tidempotency_max_per_agent 100", `"idempotency_max_records":100,"idempotency_max_per_agent":100`, ""},
		{"idempotency per agent above total", "idempotency_max_records 5\n\t\tidempotency_max_per_agent 100", `"idempotency_max_records":5,"idempotency_max_per_agent":100`,
			"idempotency_max_per_agent 100 is above idempotency_max_records 5"},
		{"idempotency per agent above default total", "idempotency_max_per_agent 100001", `"idempotency_max_per_agent":100001`,
			"idempotency_max_per_agent 100001 is above the default idempotency_max_records 100000"},
		{"idempotency total below default per agent", "idempotency_max_records 500", `"idempotency_max_records":500`, ""},
	})
}

// TestServerIDAndName: server_id is sent as a header and published in
// the manifest, so it must be visible ASCII; an empty name or server_id
// in the Caddyfile is refused (in JSON, "" is the same as leaving the
// member out: the default).
func TestServerIDAndName(t *testing.T) {
	long := strings.Repeat("s", 256)
	runConfigCases(t, []configCase{
		{"server_id", "server_id gw-1.example.com", `"server_id":"gw-1.example.com"`, ""},
		{"server_id of 255", "server_id " + long[:255], `"server_id":"` + long[:255] + `"`, ""},
		{"server_id with a newline", "server_id \"gw\nX-Injected: 1\"", `"server_id":"gw\nX-Injected: 1"`, `server_id "gw\nX-Injected: 1" must be 1-255 visible ASCII characters`},
		{"server_id with a space", `server_id "gw 1"`, `"server_id":"gw 1"`, "must be 1-255 visible ASCII characters"},
		{"server_id with a control character", "", `"server_id":"gw\u0000"`, "must be 1-255 visible ASCII characters"},
		{"server_id not ASCII", "server_id gw-é", `"server_id":"gw-é"`, "must be 1-255 visible ASCII characters"},
		{"server_id too long", "server_id " + long, `"server_id":"` + long + `"`, "must be 1-255 visible ASCII characters"},
		{"empty server_id", `server_id ""`, "", "server_id: empty value"},
		{"empty name", `name ""`, "", "name: empty value"},
		{"empty catalog", `catalog ""`, "", "catalog: empty value"},
		{"bad name", `name "a/b"`, `"name":"a/b"`, "must be 1-64 characters"},
	})
}

// TestRedirectsValidated: a redirect of a pair to itself, or from a path
// no request can be compared equal to (request paths are compared in
// RFC 3986 normal form, spec §10 step 3), is refused.
func TestRedirectsValidated(t *testing.T) {
	js := func(fm, fp, tm, tp string) string {
		return `"redirects":[{"from_method":"` + fm + `","from_path":"` + fp + `","to_method":"` + tm + `","to_path":"` + tp + `"}]`
	}
	runConfigCases(t, []configCase{
		{"pair", "redirect FETCH /a BOOK /b", js("FETCH", "/a", "BOOK", "/b"), ""},
		{"method only", "redirect FETCH /a BOOK /a", js("FETCH", "/a", "BOOK", "/a"), ""},
		{"every path to one", "redirect FETCH * FETCH /b", js("FETCH", "", "FETCH", "/b"), ""},
		{"trailing slash repaired", "redirect FETCH /a/ FETCH /a", js("FETCH", "/a/", "FETCH", "/a"), ""},
		{"to itself", "redirect FETCH /a FETCH /a", js("FETCH", "/a", "FETCH", "/a"), "redirects[0] (FETCH /a → FETCH /a) redirects the pair to itself"},
		{"to itself, path kept", "redirect FETCH /a FETCH *", js("FETCH", "/a", "FETCH", ""), "redirects the pair to itself"},
		{"every pair to itself", "redirect FETCH * FETCH *", js("FETCH", "", "FETCH", ""), "redirects[0] (FETCH * → FETCH *) redirects the pair to itself"},
		{"to itself in another spelling", "redirect FETCH /a FETCH /%61", js("FETCH", "/a", "FETCH", "/%61"), "redirects the pair to itself"},
		{"from an escaped unreserved character", "redirect FETCH /%61 BOOK /b", js("FETCH", "/%61", "BOOK", "/b"),
			`from_path "/%61" never matches: request paths are compared in RFC 3986 normal form; write "/a"`},
		{"from lower-case hex", "redirect FETCH /a%2fb BOOK /b", js("FETCH", "/a%2fb", "BOOK", "/b"), `write "/a%2Fb"`},
		{"from a path that is not UTF-8", "redirect FETCH /%FF BOOK /b", js("FETCH", "/%FF", "BOOK", "/b"), `from_path "/%FF" never matches`},
		{"from a malformed escape (method policy)", "redirect FETCH /%zz BOOK /b", js("FETCH", "/%zz", "BOOK", "/b"), `from_path "/%zz" is not a valid path`},
	})
}

// TestRedirectFromPathOutsideTheGrammar: redirects apply before the path
// grammar (spec §10 steps 3 and 4), so a from_path the grammar refuses
// (a trailing "/") is matched and repaired, as docs/configuration.md
// says; without the redirect the same request is 460.
func TestRedirectFromPathOutsideTheGrammar(t *testing.T) {
	up := benchUpstream(t)
	docs := filepath.Join("..", "scripts", "bench", "docs")
	for _, redirect := range []bool{true, false} {
		h := &Handler{}
		h.Name = "redirect-repair-" + strconv.FormatBool(redirect)
		h.RecordsDir = "off"
		h.Upstreams = map[string]*engine.UpstreamConfig{"bench": {URL: up.URL}}
		h.Agents = []string{filepath.Join(docs, "agents")}
		h.Endpoints = []string{filepath.Join(docs, "endpoints")}
		if redirect {
			h.Redirects = []engine.RedirectConfig{{FromMethod: "FETCH", FromPath: "/items/1/", ToMethod: "FETCH", ToPath: "/items/1"}}
		}
		if err := h.Provision(benchContext(t)); err != nil {
			t.Fatalf("Provision: %v", err)
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		t.Cleanup(func() { _ = h.Cleanup() })
		w := &discardWriter{hdr: http.Header{}}
		r := benchRequest(w, "FETCH", "/items/1/", "", map[string]string{"Agent-ID": benchAgent, "Authority-Scope": "bench:read"})
		if err := h.ServeHTTP(w, r, notFound); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 200, false: 460}[redirect]; w.status != want {
			t.Errorf("redirect %v: FETCH /items/1/ = %d %s, want %d", redirect, w.status, w.head, want)
		}
	}
}

// TestNegativeLimitsJSON: JSON can say what the Caddyfile refuses; a
// negative idempotency bound is an error, not the default.
func TestNegativeLimitsJSON(t *testing.T) {
	runConfigCases(t, []configCase{
		{"idempotency_max_records", "", `"idempotency_max_records":-1`, "must not be negative"},
		{"idempotency_max_per_agent", "", `"idempotency_max_per_agent":-1`, "must not be negative"},
		{"idempotency_window", "", `"idempotency_window":-1000000000`, "must not be negative"},
	})
}

// TestNegativeKnobsNamedJSON: each negative bound or duration in JSON is
// refused with its member named, not a shared "limits must not be
// negative".
func TestNegativeKnobsNamedJSON(t *testing.T) {
	var cases []configCase
	for _, k := range []string{"signature_max_age", "signature_skew", "replay_cache_size", "rate_limit_per_minute", "rate_limit_burst",
		"invocation_rate_limit_per_minute", "invocation_rate_limit_burst", "max_request_body", "max_upstream_response",
		"refused_body_drain", "refused_body_drain_timeout", "max_contracts", "max_contracts_per_agent", "attempt_buffer", "idempotency_window", "idempotency_max_records",
		"idempotency_max_per_agent", "idempotency_lease_margin", "contract_ttl", "tombstone_ttl", "composition_timeout"} {
		cases = append(cases, configCase{k, "", `"` + k + `":-1`, "rcns: " + k + " must not be negative"})
	}
	cases = append(cases,
		configCase{"upstream timeout", "", `"upstreams":{"a":{"url":"http://127.0.0.1:1","timeout":-1}}`, `upstream "a": timeout must not be negative`},
		configCase{"upstream max_conns", "", `"upstreams":{"a":{"url":"http://127.0.0.1:1","max_conns":-1}}`, `upstream "a": max_conns must not be negative`})
	runConfigCases(t, cases)
}

// TestUpstreamNames: an upstream is declared under a name an endpoint's
// external_service.upstream can match (the endpoint schema's pattern),
// or refused, in the Caddyfile and in JSON.
func TestUpstreamNames(t *testing.T) {
	up := func(name string) (string, string) {
		return strconv.Quote(name) + " http://127.0.0.1:1", `"upstreams":{` + strconv.Quote(name) + `:{"url":"http://127.0.0.1:1"}}`
	}
	var cases []configCase
	for _, tc := range []struct{ name, want string }{
		{"hotel-api.v2", ""},
		{"", `upstream "": the name must match ^[^\s{}]+$`},
		{"a b", `upstream "a b": the name must match ^[^\s{}]+$`},
		{"a\tb", `upstream "a\tb": the name must match`},
		{"{a}", `upstream "{a}": the name must match`},
	} {
		cf, js := up(tc.name)
		if strings.Contains(tc.name, "\t") {
			cf = "" // a Caddyfile quoted token has no escapes: JSON only
		} else {
			cf = "upstream " + cf
		}
		cases = append(cases, configCase{"name " + strconv.Quote(tc.name), cf, js, tc.want})
	}
	runConfigCases(t, cases)
}

// TestEmptyPathsJSON: in JSON an empty entry in a list of files or
// directories is refused naming the member and index (it failed with
// "open : no such file" or ": cannot stat").
func TestEmptyPathsJSON(t *testing.T) {
	var cases []configCase
	for _, k := range []string{"agents", "endpoints", "recipes", "record_keys"} {
		cases = append(cases, configCase{k, "", `"` + k + `":[""]`, "rcns: " + k + "[0]: empty value"})
	}
	runConfigCases(t, cases)
}

// TestSignatureAuthorities: signature_authorities takes RFC 9110
// host[:port] values as a request's Host carries them; a URL, a path, a
// wildcard or a bad port is refused at load, naming the entry.
func TestSignatureAuthorities(t *testing.T) {
	cases := []configCase{
		{"names, address, literal, ports", "signature_authorities gw.example.com GW.Example.com:8443 127.0.0.1:8080 [::1]:8080 [2001:db8::1]",
			`"signature_authorities":["gw.example.com","GW.Example.com:8443","127.0.0.1:8080","[::1]:8080","[2001:db8::1]"]`, ""},
		{"with identity signature", "identity signature\n\t\tsignature_authorities gw.example.com", `"identity":"signature","signature_authorities":["gw.example.com"]`, ""},
	}
	for _, tc := range []struct{ value, want string }{
		{"https://gw.example.com", "give the Host a request carries, without scheme, user information or path"},
		{"gw.example.com/rcns", "give the Host a request carries, without scheme, user information or path"},
		{"agent@gw.example.com", "give the Host a request carries, without scheme, user information or path"},
		{"*.example.com", "wildcards are not supported; list each host name"},
		{"gw example", `the character ' ' is not allowed in a host name`},
		{"gw.exämple.com", `the character 'ä' (U+00E4) is not allowed in a host name`},
		{"gw.example.com:0", "the port must be 1-65535"},
		{"gw.example.com:65536", "the port must be 1-65535"},
		{"gw.example.com:", "the port must be 1-65535"},
		{"gw.example.com:+80", "the port must be 1-65535"},
		{"gw.example.com:http", "the port must be 1-65535"},
		{":8080", "the host is empty"},
		{"[::1", "the IPv6 literal has no closing ]"},
		{"[127.0.0.1]:80", "the bracketed host is not an IPv6 address"},
		{"[::1]8080", "text after the IPv6 literal"},
		{"::1", "write an IPv6 address in brackets"},
	} {
		cases = append(cases, configCase{tc.value, "signature_authorities " + strconv.Quote(tc.value),
			`"signature_authorities":["gw.example.com",` + strconv.Quote(tc.value) + `]`,
			strconv.Quote(tc.value) + " is not host[:port]: " + tc.want})
	}
	cases = append(cases, configCase{"empty", `signature_authorities ""`, `"signature_authorities":[""]`, `"" is not host[:port]: the host is empty`})
	runConfigCases(t, cases)
	if err := validateHandlerJSON(t, `"signature_authorities":["gw.example.com","a,b"]`); err == nil || !strings.Contains(err.Error(), `rcns: invalid configuration: signature_authorities[1] "a,b" is not host[:port]: the character ',' is not allowed`) {
		t.Errorf("JSON error %v does not name signature_authorities[1]", err)
	}
	// A byte that is not UTF-8 (no config file can carry one) is named
	// as a byte, not as a Latin-1 character.
	if err := engine.CheckAuthority("gw.ex\xe4mple.com"); err == nil || err.Error() != "is not host[:port]: the byte 0xE4 (not valid UTF-8) is not allowed in a host name" {
		t.Errorf("engine.CheckAuthority(invalid UTF-8) = %v", err)
	}
}

// TestDuplicateAgentID: the same agent_id in two agent documents fails
// the load naming both files, with the line and pointer of the second
// (as every other document error), not only the registry's index.
func TestDuplicateAgentID(t *testing.T) {
	dir := t.TempDir()
	const id = "c7f080d97c6a985b1decfb9a9857a05894ecfdd083fca2583dc933201664160e"
	for name, doc := range map[string]string{
		"a-first.yaml":  "name: first\nagent_id: " + id + "\nowner_id: ops\ntrust_tier: 1\n",
		"b-second.yaml": "# the same agent again\nname: second\nowner_id: ops\nagent_id: " + id + "\ntrust_tier: 2\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	first, second := filepath.Join(dir, "a-first.yaml"), filepath.Join(dir, "b-second.yaml")
	want := second + ":4:1: at /agent_id: agent_id " + id + " is already declared in " + first + ":2"
	runConfigCases(t, []configCase{
		{"directory", "agents " + dir, `"agents":[` + strconv.Quote(dir) + `]`, want},
		{"files", "agents " + first + " " + second, `"agents":[` + strconv.Quote(first) + `,` + strconv.Quote(second) + `]`, want},
		{"one file twice", "agents " + first + " " + first, `"agents":[` + strconv.Quote(first) + `,` + strconv.Quote(first) + `]`,
			first + ":2:1: at /agent_id: agent_id " + id + ": this file is loaded twice"},
	})
}

// TestMinDurations: the duration knobs that count in whole seconds
// (contract_ttl, tombstone_ttl, idempotency_window,
// idempotency_lease_margin, signature_max_age, signature_skew) refuse a value under 1s at load, naming the knob; 1s
// is accepted. composition_timeout may be shorter.
func TestMinDurations(t *testing.T) {
	var cases []configCase
	for _, k := range []string{"contract_ttl", "tombstone_ttl", "idempotency_window", "idempotency_lease_margin", "signature_max_age", "signature_skew"} {
		cases = append(cases,
			configCase{k + " 1ms", k + " 1ms", `"` + k + `":1000000`, "rcns: invalid configuration: " + k + " 1ms is below the minimum 1s"},
			configCase{k + " 999ms", k + " 999ms", `"` + k + `":999000000`, "rcns: invalid configuration: " + k + " 999ms is below the minimum 1s"},
			configCase{k + " 1ns", "", `"` + k + `":1`, "rcns: invalid configuration: " + k + " 1ns is below the minimum 1s"},
			configCase{k + " 1s", k + " 1s", `"` + k + `":1000000000`, ""},
			configCase{k + " 1.5s", k + " 1500ms", `"` + k + `":1500000000`, ""})
	}
	cases = append(cases, configCase{"composition_timeout 100ms", "composition_timeout 100ms", `"composition_timeout":100000000`, ""})
	runConfigCases(t, cases)
}

// TestConfigErrorsNameModuleOnce: Caddy names the directive, the global
// option or the app before a Caddyfile or provisioning error ("parsing
// caddyfile tokens for 'agtp': ", "provision agtp: "), so the
// gateway's message does not name it again (helper-147).
func TestConfigErrorsNameModuleOnce(t *testing.T) {
	adapt := func(src string) error {
		raw, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
		if err != nil {
			return err
		}
		return validateJSON(t, raw)
	}
	site := ":8080 {\n\trcns {\n\t\trecords_dir off\n\t}\n}\n"
	for _, tc := range []struct{ name, src, want string }{
		{"rcns subdirective", ":8080 {\n\trcns {\n\t\tbogus 1\n\t}\n}\n", `'rcns': unknown subdirective "bogus"`},
		{"agtp subdirective", "{\n\tagtp 127.0.0.1:4480 {\n\t\tbogus 1\n\t}\n}\n" + site, `'agtp': unknown subdirective "bogus"`},
		{"agtp without address", "{\n\tagtp\n}\n" + site, `'agtp': give at least one listen address`},
		{"agtp handler unknown", "{\n\tagtp 127.0.0.1:4480 {\n\t\thandler nope\n\t}\n}\n" + site, `provision agtp: servers[0] (127.0.0.1:4480): handler "nope": no rcns handler`},
		{"agtp address without a port", "{\n\tagtp notanaddress\n}\n" + site, `provision agtp: servers[0]: listen "notanaddress": no port: give host:port`},
		{"agtp address with a scheme", "{\n\tagtp agtp://127.0.0.1:4480\n}\n" + site, `listen "agtp://127.0.0.1:4480": give an address without a scheme`},
		{"agtp address of a datagram network", "{\n\tagtp udp/127.0.0.1:4480\n}\n" + site, `listen "udp/127.0.0.1:4480": network "udp" is not a stream`},
		{"agtp max_connections too large", "{\n\tagtp 127.0.0.1:4480 {\n\t\tmax_connections 9999999999999999999999\n\t}\n}\n" + site, `'agtp': max_connections: "9999999999999999999999" is too large`},
		{"agtp max_header_size 0", "{\n\tagtp 127.0.0.1:4480 {\n\t\tmax_header_size 0\n\t}\n}\n" + site, `'agtp': max_header_size: "0" is below 1KiB`},
		{"agtp max_header_size 512", "{\n\tagtp 127.0.0.1:4480 {\n\t\tmax_header_size 512\n\t}\n}\n" + site, `'agtp': max_header_size: "512" is below 1KiB`},
		{"agtp address twice", "{\n\tagtp 127.0.0.1:4480 127.0.0.1:4480\n}\n" + site, `provision agtp: servers[0]: 127.0.0.1:4480 is listened on twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := adapt(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			for _, twice := range []string{"rcns: rcns: ", "agtp: agtp: ", "': rcns: ", "': agtp: "} {
				if strings.Contains(err.Error(), twice) {
					t.Errorf("err = %v: the module is named twice (%q)", err, twice)
				}
			}
		})
	}
}

// TestMissingDocumentPathsNamed: a path of agents, endpoints or recipes
// that does not exist is named with the kind of documents it was given
// for (helper-148: "/x: cannot stat" said which file, not which knob).
func TestMissingDocumentPathsNamed(t *testing.T) {
	var cases []configCase
	for _, k := range []struct{ knob, kind string }{{"agents", "agent"}, {"endpoints", "endpoint"}, {"recipes", "recipe"}} {
		missing := filepath.Join(t.TempDir(), "no-such")
		cases = append(cases, configCase{k.knob, k.knob + " " + missing, `"` + k.knob + `":["` + missing + `"]`,
			missing + ": cannot stat: no such file or directory (given as a path of " + k.kind + " documents, as `" + k.knob + "`"})
	}
	runConfigCases(t, cases)
}

// TestRateLimitBounded: a rate over MaxRatePerMinute is refused, naming
// the knob, in JSON as in the Caddyfile (its default burst, the rate
// rounded up, overflowed an int: helper-150).
func TestRateLimitBounded(t *testing.T) {
	runConfigCases(t, []configCase{
		{"gate", "rate_limit rcns 2e9", `"rate_limit_per_minute":2e9`, "over 1e+09"},
		{"invocation", "rate_limit invocation 2e9", `"invocation_rate_limit_per_minute":2e9`, "over 1e+09"},
		{"at the bound", "rate_limit rcns 1e9", `"rate_limit_per_minute":1e9`, ""},
		// helper-151: passed the parser, failed at provision (window 6e+301 s).
		{"tiny", "rate_limit rcns 1e-300", `"rate_limit_per_minute":1e-300`, "under 1e-06"},
		{"at the lower bound", "rate_limit rcns 1e-6", `"rate_limit_per_minute":1e-6`, ""},
	})
}

// TestAGTPHeaderLimitBoundedInJSON: the native door's header limit has
// the Caddyfile's ceiling (1 GiB) in JSON too (helper-151: 4 GiB was a
// valid configuration).
func TestAGTPHeaderLimitBoundedInJSON(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  string
	}{{1 << 30, ""}, {1<<30 + 1, "is over 1073741824 (1GiB)"}, {4 << 30, "is over 1073741824 (1GiB)"}} {
		raw := fmt.Sprintf(`{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"rcns","records_dir":"off"}]}]}}},`+
			`"agtp":{"servers":[{"listen":["127.0.0.1:4480"],"max_header_bytes":%d}]}}}`, tc.bytes)
		err := validateJSON(t, []byte(raw))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("max_header_bytes %d: %v, want %q", tc.bytes, err, tc.want)
		}
	}
}
