package caddymodule

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

var update = flag.Bool("update", false, "rewrite the JSON half of testdata/*.caddyfiletest")

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the golden half (the caddytest convention:
// Caddyfile, a line of dashes, JSON).
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.SplitN(string(raw), "----------\n", 2)
			if len(parts) != 2 {
				t.Fatal("golden file lacks the ---------- separator")
			}
			got, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(parts[0]), map[string]any{"filename": "Caddyfile"})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			for _, w := range warn {
				t.Logf("warning: %v", w)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, got, "", "\t"); err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(f, []byte(parts[0]+"----------\n"+pretty.String()+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if strings.TrimSpace(pretty.String()) != strings.TrimSpace(parts[1]) {
				t.Fatalf("adapted JSON differs from the golden file (run go test -run TestCaddyfileAdapt -update and review the diff):\n%s", pretty.String())
			}
		})
	}
}

// TestDirectiveOrder checks that rcns runs before every handler that
// could answer or re-encode first (ARCHITECTURE.md "Caddyfile").
func TestDirectiveOrder(t *testing.T) {
	src := ":8080 {\n\tencode gzip\n\trespond /x 200\n\thandle /y {\n\t\trespond 204\n\t}\n\turi strip_prefix /z\n\trcns\n\treverse_proxy 127.0.0.1:1\n}\n"
	got, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	first := strings.Index(s, `"handler":"rcns"`)
	if first < 0 {
		t.Fatalf("no rcns handler in %s", s)
	}
	for _, other := range []string{`"handler":"encode"`, `"handler":"static_response"`, `"handler":"rewrite"`, `"handler":"subroute"`, `"handler":"reverse_proxy"`} {
		if i := strings.Index(s, other); i >= 0 && i < first {
			t.Errorf("%s comes before rcns in %s", other, s)
		}
	}
}

func TestCaddyfileErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"unknown subdirective", "bogus 1", "unknown subdirective"},
		{"bad mode arg count", "mode", "exactly one argument"},
		{"bad ttl", "contract_ttl soon", "contract_ttl"},
		{"bad size", "max_request_body lots", "not a size"},
		{"upstream arity", "upstream only-name", "upstream"},
		{"duplicate upstream", "upstream a http://127.0.0.1:1\n\t\tupstream a http://127.0.0.1:2", "declared twice"},
		{"redirect arity", "redirect A /b C", "redirect"},
		{"bad bool", "enabled maybe", "not true or false"},
		{"negative upstream timeout", "upstream a http://127.0.0.1:1 {\n\t\t\ttimeout -1s\n\t\t}", "upstream a: timeout: \"-1s\" is out of range: the allowed range is 1ms to 1h"},
		{"knob twice", "mode optimistic\n\t\tmode confirm-first", "mode is set twice"},
		{"rate limit twice", "rate_limit rcns 10\n\t\trate_limit rcns 20", "rate_limit rcns is set twice"},
		{"zero upstream timeout", "upstream a http://127.0.0.1:1 {\n\t\t\ttimeout 0s\n\t\t}", "upstream a: timeout: \"0s\" is out of range: the allowed range is 1ms to 1h"},
		// A value time.Duration cannot hold is out of the range too, not
		// "must be a positive duration"; so is one above 1h.
		{"huge upstream timeout", "upstream a http://127.0.0.1:1 {\n\t\t\ttimeout 999999999999h\n\t\t}", "upstream a: timeout: \"999999999999h\" is out of range: the allowed range is 1ms to 1h"},
		{"upstream timeout above 1h", "upstream a http://127.0.0.1:1 {\n\t\t\ttimeout 61m\n\t\t}", "upstream a: timeout: \"61m\" is out of range: the allowed range is 1ms to 1h"},
		{"upstream timeout not a duration", "upstream a http://127.0.0.1:1 {\n\t\t\ttimeout soon\n\t\t}", "upstream a: timeout: \"soon\" is not a duration"},
		{"ttl not a duration", "contract_ttl soon", "contract_ttl: \"soon\" is not a duration"},
		{"huge contract_ttl", "contract_ttl 999999999999h", "contract_ttl: \"999999999999h\" is too large: a duration can be at most 2562047h"},
		{"huge tombstone_ttl", "tombstone_ttl 2562048h", "tombstone_ttl: \"2562048h\" is too large"},
		{"huge composition_timeout", "composition_timeout 99999999999d", "composition_timeout: \"99999999999d\" is too large"},
		{"huge idempotency_window", "idempotency_window 999999999999h", "idempotency_window: \"999999999999h\" is too large"},
		{"huge signature_max_age", "signature_max_age 999999999999h", "signature_max_age: \"999999999999h\" is too large"},
		// NaN and Inf parse as floats and broke the adapted JSON; a huge
		// rate overflowed its default burst (helper-150).
		{"rate_limit NaN", "rate_limit rcns NaN", `rate_limit: "NaN" is not a positive number of tokens per minute`},
		{"rate_limit Inf", "rate_limit rcns Inf 5", `rate_limit: "Inf" is not a positive number of tokens per minute`},
		{"rate_limit huge", "rate_limit rcns 99999999999999999999", `rate_limit: "99999999999999999999" tokens per minute is over 1e+09`},
		{"rate_limit huge burst", "rate_limit rcns 10 99999999999999999999", `rate_limit: burst: "99999999999999999999" is too large`},
		{"huge max_contracts", "max_contracts 99999999999999999999", `max_contracts: "99999999999999999999" is too large (at most 9223372036854775807)`},
		{"huge negative ttl", "contract_ttl -999999999999h", "contract_ttl: \"-999999999999h\" must be a positive duration"},
		{"zero idempotency_window", "idempotency_window 0s", "idempotency_window: \"0s\" must be a positive duration"},
		{"zero idempotency_lease_margin", "idempotency_lease_margin 0s", "idempotency_lease_margin: \"0s\" must be a positive duration"},
		// Names an endpoint's external_service.upstream can never match.
		{"empty upstream name", `upstream "" http://127.0.0.1:1`, `upstream "": the name must match ^[^\s{}]+$`},
		{"upstream name with a space", `upstream "a b" http://127.0.0.1:1`, `upstream "a b": the name must match ^[^\s{}]+$`},
		{"upstream name with a brace", `upstream "a{b}" http://127.0.0.1:1`, `upstream "a{b}": the name must match`},
		// File and directory knobs: an empty value is a mistake.
		{"empty agents", `agents ""`, "agents: empty value"},
		{"empty endpoints among others", `endpoints a.yaml ""`, "endpoints: empty value"},
		{"empty recipes", `recipes ""`, "recipes: empty value"},
		{"empty record_keys", `record_keys ""`, "record_keys: empty value"},
		// record_keys off is the unsigned default, alone.
		{"record_keys off with a key", `record_keys off k.pem`, "record_keys: off stands alone"},
		{"record_keys key then off", "record_keys k.pem\n\t\trecord_keys off", "record_keys: off stands alone"},
		{"record_keys off then a key", "record_keys off\n\t\trecord_keys k.pem", "record_keys: off stands alone"},
		// The operator page's block.
		{"operator_page twice", "operator_page\n\t\toperator_page /x", "operator_page is set twice"},
		{"operator_page two paths", "operator_page /a /b", "at most one argument"},
		{"operator_page unknown", "operator_page {\n\t\t\tpassword x\n\t\t}", `unknown subdirective "password"`},
		{"operator_page basic arity", "operator_page {\n\t\t\tbasic sre\n\t\t}", "basic takes a user and a password"},
		{"operator_page bearer arity", "operator_page {\n\t\t\tbearer\n\t\t}", "bearer takes one token"},
		{"operator_page empty allow", "operator_page {\n\t\t\tallow\n\t\t}", "allow needs at least one"},
		{"operator_page max_rows", "operator_page {\n\t\t\tmax_rows 0\n\t\t}", "max_rows \"0\" is not a number in 1..1000"},
		{"operator_page dns_rebinding_protection", "operator_page {\n\t\t\tdns_rebinding_protection maybe\n\t\t}", "dns_rebinding_protection takes true or false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := ":8080 {\n\trcns {\n\t\t" + tc.body + "\n\t}\n}\n"
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestRecordKeysOff: `record_keys off` (what Caddyfile.example's
// {$RCNS_RECORD_KEYS:off} gives when the variable is unset) configures
// no key, as leaving the line out does, while a path is kept.
func TestRecordKeysOff(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string
	}{
		{"record_keys off", `"handler":"rcns"}`},
		{"record_keys /k/a.pem /k/b.pem", `"record_keys":["/k/a.pem","/k/b.pem"]`},
	} {
		src := ":8080 {\n\trcns {\n\t\t" + tc.line + "\n\t}\n}\n"
		got, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if !strings.Contains(string(got), tc.want) {
			t.Errorf("%s adapts to %s, want it to contain %s", tc.line, got, tc.want)
		}
	}
}
