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
UNIT_PKGS           := ./policy/... ./recipes/... ./caddymodule/...
INTEGRATION_TIMEOUT ?= 20m

.PHONY: all build deps vet unit integration test demo clean

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
