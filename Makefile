# caddy-rcns — build, test and demo targets.
#
#   make build        bin/caddy (Caddy with the rcns module)
#   make deps         json-server 0.17.4, promtool and the MCP clients (the
#                     conformance suite, bun to run it, the Inspector CLI)
#                     into .tools/ (test tools)
#   make test         vet, unit tests (-race), every benchmark once (bench-smoke), then the integration suite
#   make unit         unit tests only
#   make integration  black-box suite only (builds its own Caddy binary)
#   make demo         the hotel demo (scripts/demo.sh)

GO                  ?= go
JSON_SERVER_VERSION := 0.17.4
JSON_SERVER         := .tools/node_modules/.bin/json-server
PROMTOOL            := .tools/bin/promtool
# Clients of the MCP door that are not the Go SDK (integration/mcp_clients_test.go):
# the official conformance suite needs Node >= 22, so it runs under bun,
# whose npm package ships its runtime.
MCP_CONFORMANCE_VERSION   := 0.1.16
BUN_VERSION               := 1.4.5
MCP_INSPECTOR_CLI_VERSION := 1.0.3
MCP_CLIENTS               := .tools/.mcp-clients-$(MCP_CONFORMANCE_VERSION)-$(BUN_VERSION)-$(MCP_INSPECTOR_CLI_VERSION)
UNIT_PKGS           := ./policy/... ./recipes/... ./caddymodule/... ./cmd/... ./scripts/...
INTEGRATION_TIMEOUT ?= 20m

.PHONY: all build deps vet unit bench-smoke integration test demo clean bench

all: build

build:
	$(GO) build -o bin/caddy ./cmd/caddy

deps: $(JSON_SERVER) $(PROMTOOL) $(MCP_CLIENTS)

$(PROMTOOL):
	bash scripts/install-promtool.sh

$(JSON_SERVER):
	npm install --prefix .tools --no-audit --no-fund --loglevel=error json-server@$(JSON_SERVER_VERSION)

$(MCP_CLIENTS): $(JSON_SERVER)
	npm install --prefix .tools --no-audit --no-fund --loglevel=error \
		@modelcontextprotocol/conformance@$(MCP_CONFORMANCE_VERSION) bun@$(BUN_VERSION) \
		@modelcontextprotocol/inspector-cli@$(MCP_INSPECTOR_CLI_VERSION)
	.tools/node_modules/.bin/bun --version
	touch $@

vet:
	$(GO) vet ./...

unit: deps
	$(GO) test -race $(UNIT_PKGS)

integration: deps
	$(GO) test -race -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) ./integration/...

# Every benchmark once (-benchtime 1x), so a benchmark broken by a change
# fails the tests, not only `make bench`.
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS)

test: vet unit bench-smoke integration

demo:
	bash scripts/demo.sh

clean:
	rm -rf bin

# make bench: Go benchmarks of the per-stage and in-process handler
# costs (medians of BENCH_COUNT runs, about 4 min), then the loopback load
# comparison (scripts/bench/load.sh, about 7 min with 4 rounds), then
# docs/performance.md regenerated from both (scripts/bench/perfdoc).
# BENCH_OUT keeps the raw output, report.md, results.json and profiles;
# LOAD_ARGS go to the load driver (e.g. LOAD_ARGS='-rounds 5').
BENCH_COUNT ?= 6
BENCH_TIME  ?= 250ms
BENCH_PKGS  := ./policy ./policy/ratelimit ./policy/idempotency ./policy/records ./recipes ./caddymodule
BENCH_OUT   ?= bin/bench
LOAD_ARGS   ?= -rounds 4
BENCH_GO    := go test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) $(BENCH_PKGS)

bench:
	mkdir -p $(BENCH_OUT)
	date +%s > $(BENCH_OUT)/started
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) -timeout 15m $(BENCH_PKGS) 2>&1 | grep -v '^{"level"' | tee $(BENCH_OUT)/go-bench.txt
	! grep -Eq '^(FAIL|panic:|--- FAIL)' $(BENCH_OUT)/go-bench.txt
	rm -rf $(BENCH_OUT)/load
	bash scripts/bench/load.sh -out $(BENCH_OUT)/load $(LOAD_ARGS)
	$(GO) run ./scripts/bench/perfdoc -go $(BENCH_OUT)/go-bench.txt -load $(BENCH_OUT)/load \
		-medians $(BENCH_OUT)/go-bench-medians.md -out docs/performance.md \
		-command "make bench" -go-command "$(BENCH_GO)" -started $(BENCH_OUT)/started
