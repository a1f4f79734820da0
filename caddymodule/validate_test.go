package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"

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
