# caddy-rcns — build, test and demo targets.
#
#   make build        bin/caddy (Caddy with the rcns module)
#   make deps         json-server 0.17.4 and promtool into .tools/ (test tools)
#   make test         vet, unit tests (-race), then the integration suite
#   make unit         unit tests only
#   make integration  black-box suite only (builds its own Caddy binary)
#   make demo         the hotel demo (scripts/demo.sh)

GO                  ?= go
JSON_SERVER_VERSION := 0.17.4
JSON_SERVER         := .tools/node_modules/.bin/json-server
PROMTOOL            := .tools/bin/promtool
UNIT_PKGS           := ./policy/... ./recipes/... ./caddymodule/... ./cmd/...
INTEGRATION_TIMEOUT ?= 20m

.PHONY: all build deps vet unit integration test demo clean bench

all: build

build:
	$(GO) build -o bin/caddy ./cmd/caddy

deps: $(JSON_SERVER) $(PROMTOOL)

$(PROMTOOL):
	bash scripts/install-promtool.sh

$(JSON_SERVER):
	npm install --prefix .tools --no-audit --no-fund --loglevel=error json-server@$(JSON_SERVER_VERSION)

vet:
	$(GO) vet ./...

unit: deps
	$(GO) test -race $(UNIT_PKGS)

integration: deps
	$(GO) test -race -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) ./integration/...

test: vet unit integration

demo:
	bash scripts/demo.sh

clean:
	rm -rf bin

# make bench: Go benchmarks of the per-stage costs (medians of
# BENCH_COUNT runs, about 3 min) then the loopback load comparison
# (scripts/bench/load.sh, about 12 min); see docs/performance.md.
# BENCH_OUT keeps the raw output, report.md, results.json and profiles;
# LOAD_ARGS go to the load driver (e.g. LOAD_ARGS='-rounds 3').
BENCH_COUNT ?= 8
BENCH_TIME  ?= 250ms
BENCH_PKGS  := ./policy ./policy/ratelimit ./policy/idempotency ./policy/records ./recipes
BENCH_OUT   ?= bin/bench
LOAD_ARGS   ?=

bench:
	mkdir -p $(BENCH_OUT)
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) -timeout 15m $(BENCH_PKGS) 2>&1 | tee $(BENCH_OUT)/go-bench.txt
	! grep -Eq '^(FAIL|panic:|--- FAIL)' $(BENCH_OUT)/go-bench.txt
	$(GO) run ./scripts/bench/benchmed $(BENCH_OUT)/go-bench.txt | tee $(BENCH_OUT)/go-bench-medians.md
	bash scripts/bench/load.sh -out $(BENCH_OUT)/load $(LOAD_ARGS)
