# caddy-rcns — build, test and demo targets.
#
#   make build        bin/caddy (Caddy with the rcns module)
#   make deps         json-server 0.17.4, promtool and the Prometheus server,
#                     redis-server 7.0, chromium (Debian's, the operator
#                     page's browser test) and the MCP
#                     clients (the conformance suite, bun to run it, the
#                     Inspector CLI) into .tools/ (test tools), and
#                     oidc-provider 9.13.3, the OAuth 2.1 / OpenID
#                     authorization server of internal/oauthtest
#                     (scripts/oauth/authserver.mjs; warns on Node < 22),
#                     mcp-remote 0.15.1 (the stdio bridge of MCP hosts), and the
#                     agent frameworks' MCP clients (@ai-sdk/mcp, @openai/agents,
#                     @langchain/mcp-adapters), and the newest conformance suite
#                     (0.2.0-alpha.12, into .tools/conformance-next/),
#                     and Jaeger v1.75.0 (.tools/bin/jaeger, built from the
#                     tools/jaeger module: the trace backend of
#                     integration/tracing_test.go; about 3 minutes once)
#   make test         vet, unit tests (-race), every benchmark once (bench-smoke), then the integration suite
#   make unit         unit tests only
#   make integration  black-box suite only (builds its own Caddy binary), over the HTTP door then the native door
#   make demo         the hotel demo (scripts/demo.sh); RCNS_DEMO_IDENTITY=signature
#                     (default), header, or oauth (starts a local oidc-provider
#                     authorization server for the run; needs make deps)

GO                  ?= go
JSON_SERVER_VERSION := 0.17.4
JSON_SERVER         := .tools/node_modules/.bin/json-server
PROMTOOL            := .tools/bin/promtool
PROMETHEUS          := .tools/bin/prometheus
REDIS_SERVER        := .tools/bin/redis-server
# Debian's chromium, for the operator page's headless browser test
# (integration/oppage_test.go), linked here by scripts/install-chromium.sh.
CHROMIUM            := .tools/bin/chromium
# Clients of the MCP door that are not the Go SDK (integration/mcp_clients_test.go):
# the official conformance suite needs Node >= 22, so it runs under bun,
# whose npm package ships its runtime.
MCP_CONFORMANCE_VERSION   := 0.1.16
BUN_VERSION               := 1.4.5
MCP_INSPECTOR_CLI_VERSION := 1.0.3
MCP_CLIENTS               := .tools/.mcp-clients-$(MCP_CONFORMANCE_VERSION)-$(BUN_VERSION)-$(MCP_INSPECTOR_CLI_VERSION)
# The newest conformance suite (npm tag latest still names 0.1.16), held
# to its 2026-07-28 requirement set beside the pinned one
# (TestMCPConformanceNext). It goes into its own prefix,
# .tools/conformance-next/, so that its dependencies resolve on their
# own and installing it rewrites none of .tools/node_modules.
MCP_CONFORMANCE_NEXT_VERSION := 0.2.0-alpha.12
MCP_CONFORMANCE_NEXT         := .tools/.mcp-conformance-next-$(MCP_CONFORMANCE_NEXT_VERSION)
# The authorization server the OAuth tests run (internal/oauthtest starts
# scripts/oauth/authserver.mjs, which imports it).
OIDC_PROVIDER_VERSION     := 9.13.3
OIDC_PROVIDER             := .tools/.oidc-provider-$(OIDC_PROVIDER_VERSION)
# mcp-remote, the stdio bridge MCP hosts (Claude Desktop) run, whose OAuth
# flow integration/mcp_oauth_clients_test.go walks against the demo.
MCP_REMOTE_VERSION        := 0.15.1
MCP_REMOTE                := .tools/.mcp-remote-$(MCP_REMOTE_VERSION)
# Agent frameworks' MCP clients, whose model-facing tool output
# integration/mcp_frameworks_test.go checks (scripts under
# integration/testdata/mcp/frameworks/): the Vercel AI SDK (@ai-sdk/mcp with
# ai, whose tool-output conversion it uses; both want Node >= 22, so they run
# under bun), the OpenAI Agents SDK, and LangChain's MCP adapters.
AI_SDK_MCP_VERSION        := 2.0.99
AI_VERSION                := 7.0.173
OPENAI_AGENTS_VERSION     := 0.20.0
LANGCHAIN_MCP_VERSION     := 1.1.4
LANGCHAIN_CORE_VERSION    := 1.4.0
LANGGRAPH_VERSION         := 1.7.3
MCP_FRAMEWORKS            := .tools/.mcp-frameworks-$(AI_SDK_MCP_VERSION)-$(OPENAI_AGENTS_VERSION)-$(LANGCHAIN_MCP_VERSION)
# Jaeger, the trace backend TestTracingSpanTree exports to: built from its
# own module (tools/jaeger/go.mod pins v1.75.0), so that its several
# hundred dependencies stay out of the product's go.mod.
JAEGER                    := .tools/bin/jaeger
# Rebuilt when tools/jaeger's pins change, not when a fresh clone's files
# are newer than the binary (a shared .tools would be rebuilt by each).
JAEGER_STAMP              := .tools/.jaeger-$(shell cat tools/jaeger/go.mod tools/jaeger/go.sum | sha256sum | cut -c1-16)
UNIT_PKGS           := ./policy/... ./recipes/... ./caddymodule/... ./internal/... ./cmd/... ./scripts/... ./docs/...
INTEGRATION_TIMEOUT ?= 20m

.PHONY: all build deps vet unit bench-smoke integration test demo clean bench

all: build

build:
	$(GO) build -o bin/caddy ./cmd/caddy

deps: $(JSON_SERVER) $(PROMTOOL) $(PROMETHEUS) $(REDIS_SERVER) $(CHROMIUM) $(MCP_CLIENTS) $(OIDC_PROVIDER) $(MCP_REMOTE) $(MCP_FRAMEWORKS) $(MCP_CONFORMANCE_NEXT) $(JAEGER_STAMP)

$(JAEGER_STAMP):
	mkdir -p .tools/bin
	cd tools/jaeger && $(GO) build -o $(CURDIR)/$(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger
	rm -f .tools/.jaeger-*
	touch $@

$(REDIS_SERVER):
	bash scripts/install-redis.sh

$(PROMTOOL) $(PROMETHEUS):
	bash scripts/install-promtool.sh

$(CHROMIUM):
	bash scripts/install-chromium.sh

$(JSON_SERVER):
	npm install --prefix .tools --no-audit --no-fund --loglevel=error json-server@$(JSON_SERVER_VERSION)

# Order-only on json-server (installed first, as make demo needs it): each
# npm install into .tools/ rewrites every package's files, json-server's
# too, so a normal prerequisite would make every stamp stale again.
$(MCP_CLIENTS): | $(JSON_SERVER)
	npm install --prefix .tools --no-audit --no-fund --loglevel=error \
		@modelcontextprotocol/conformance@$(MCP_CONFORMANCE_VERSION) bun@$(BUN_VERSION) \
		@modelcontextprotocol/inspector-cli@$(MCP_INSPECTOR_CLI_VERSION)
	.tools/node_modules/.bin/bun --version
	touch $@

$(OIDC_PROVIDER): $(MCP_CLIENTS)
	npm install --prefix .tools --no-audit --no-fund --loglevel=error oidc-provider@$(OIDC_PROVIDER_VERSION)
	node -e "require.resolve('oidc-provider/package.json', {paths: ['.tools']})"
	touch $@

$(MCP_REMOTE): $(OIDC_PROVIDER)
	npm install --prefix .tools --no-audit --no-fund --loglevel=error mcp-remote@$(MCP_REMOTE_VERSION)
	test -f .tools/node_modules/mcp-remote/dist/proxy.js
	touch $@

$(MCP_FRAMEWORKS): $(MCP_REMOTE)
	npm install --prefix .tools --no-audit --no-fund --loglevel=error \
		@ai-sdk/mcp@$(AI_SDK_MCP_VERSION) ai@$(AI_VERSION) \
		@openai/agents@$(OPENAI_AGENTS_VERSION) \
		@langchain/mcp-adapters@$(LANGCHAIN_MCP_VERSION) \
		@langchain/core@$(LANGCHAIN_CORE_VERSION) @langchain/langgraph@$(LANGGRAPH_VERSION)
	test -f .tools/node_modules/@ai-sdk/mcp/package.json
	test -f .tools/node_modules/@openai/agents/package.json
	test -f .tools/node_modules/@langchain/mcp-adapters/package.json
	touch $@

# Run by the bun of $(MCP_CLIENTS).
$(MCP_CONFORMANCE_NEXT): $(MCP_CLIENTS)
	mkdir -p .tools/conformance-next
	npm install --prefix .tools/conformance-next --no-audit --no-fund --loglevel=error \
		@modelcontextprotocol/conformance@$(MCP_CONFORMANCE_NEXT_VERSION)
	.tools/node_modules/.bin/bun .tools/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js --version
	touch $@

vet:
	$(GO) vet ./...

unit: deps
	$(GO) test -race $(UNIT_PKGS)

# The black-box suite runs twice: its AGTP requests over the HTTP binding,
# then over the native AGTP/1.0 door (RCNS_IT_DOOR=agtp; legacy HTTP
# requests still go over HTTP). IT_HTTP_ONLY are the tests that send no
# AGTP request over the door under test (the MCP door and the operator
# page are HTTP whatever the door; legacy pass-through is plain HTTP;
# the tracing and access-log tests cover every door themselves; the
# dashboard and confirm-first credential tests are door-independent; two
# handlers of one name, which the native door cannot tell apart):
# they run once, in the first pass, and the second leaves them out.
IT_HTTP_ONLY := TestMCPFloodLogBounded|TestUpstreamCredentialsConfirmFirst|TestDashboardQueriesResolve|TestMCPConformance|TestMCPConformanceNext|TestMCPInputRequired|TestMCPInputRequiredAcrossNodes|TestMCPInputRequiredStoreDownAtStart|TestMCPTaskCancelAcrossNodes|TestMCPTaskNodeDies|TestMCPTaskGracefulStop|TestMCPTaskStoreStalled|TestMCPTaskStoreRestarted|TestMCPTaskEndHeldPastLease|TestMCPTaskLeaseRestoredOlder|TestMCPTaskLostWrittenAgain|TestMCPTaskPausedNodeStopsPlan|TestMCPTaskCancelDuringPause|TestOperatorPage|TestOperatorPageRedis|TestPassThroughUpgradeAndStream|TestTracingSpanTree|TestOneNameTwoStoresReload
integration: deps
	$(GO) test -race -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) ./integration/...
	RCNS_IT_DOOR=agtp $(GO) test -race -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) -skip '^($(IT_HTTP_ONLY))$$' ./integration/...

# Every benchmark once (-benchtime 1x), so a benchmark broken by a change
# fails the tests, not only `make bench`.
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS)

test: vet unit bench-smoke integration

demo:
	bash scripts/demo.sh

clean:
	rm -rf bin

# make bench: the loopback load comparison (scripts/bench/load.sh, about
# 20 minutes with the default 6 rounds of 3 s runs), which prints the Caddy CPU per
# request of each scenario with the targets and their verdicts and
# rewrites docs/performance.md. BENCH_OUT keeps results.json, report.md,
# loadcmp.log and profiles/; LOAD_ARGS go to the driver (e.g.
# LOAD_ARGS='-rounds 10'). The Go benchmarks of BENCH_PKGS run once in
# bench-smoke; for their numbers: go test -run '^$' -bench . -benchmem $(BENCH_PKGS).
BENCH_PKGS  := ./policy ./policy/ratelimit ./policy/idempotency ./policy/records ./recipes ./caddymodule ./caddymodule/engine
BENCH_OUT   ?= bin/bench
LOAD_ARGS   ?=

bench: deps
	mkdir -p $(BENCH_OUT)
	rm -rf $(BENCH_OUT)/profiles
	bash scripts/bench/load.sh -out $(BENCH_OUT) -page docs/performance.md $(LOAD_ARGS)
