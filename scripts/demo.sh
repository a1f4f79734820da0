#!/usr/bin/env bash
# scripts/demo.sh — run the caddy-rcns hotel demo (`make demo`).
#
# Starts the legacy hotel API (json-server 0.17.4 on a fresh copy of
# examples/hotel/db.json) and Caddy with the rcns handler
# (Caddyfile.example), prints the demo agents' ids, ready-to-paste curl
# commands and an MCP client configuration for the MCP door at /mcp, then
# waits until interrupted (Ctrl-C) and stops both. The agents' keys and
# the gateway's record-signing key (RCNS_RECORD_KEYS) are made for the
# run in its work folder; it prints how to verify the signed records.
#
# Environment (all optional):
#   RCNS_DEMO_PORT     gateway port            (default 8080)
#   HOTEL_PORT         json-server port        (default 3000)
#   RCNS_ADMIN_PORT    Caddy admin API port    (default 2019)
#   RCNS_DEMO_AGTP_PORT native AGTP/1.0 port  (default 4480)
#   RCNS_DEMO_IDENTITY signature (default: RFC 9421, keys made for the run)
#                      or header (Agent-ID trusted as sent, for clients
#                      that cannot sign, such as most MCP clients)
#                      or oauth (OAuth 2.1 bearer tokens from a local
#                      authorization server, scripts/oauth/authserver.mjs
#                      on oidc-provider, started for the run: a
#                      client_credentials client for curl, and dynamic
#                      registration for MCP hosts such as the Inspector)
#   RCNS_DEMO_OAUTH_PORT the authorization server's port, oauth only
#                      (default 9400)
#   DEMO_MAX_SECONDS   stop by itself after this many seconds (default 3600)
#   KEEP_DEMO_WORK=1   keep the work folder (db copy and logs) on exit
#   XDG_DATA_HOME      Caddy's data folder, where the records are kept
#                      (default ~/.local/share): a second demo running
#                      beside the first needs its own
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DEMO_PORT=${RCNS_DEMO_PORT:-8080}
HOTEL_PORT=${HOTEL_PORT:-3000}
ADMIN_PORT=${RCNS_ADMIN_PORT:-2019}
AGTP_PORT=${RCNS_DEMO_AGTP_PORT:-4480}
IDENTITY=${RCNS_DEMO_IDENTITY:-signature}
case "$IDENTITY" in signature | header | oauth) ;; *) printf 'demo: RCNS_DEMO_IDENTITY must be signature, header or oauth, not %s\n' "$IDENTITY" >&2; exit 1 ;; esac
OAUTH_PORT=${RCNS_DEMO_OAUTH_PORT:-9400}
MAX_SECONDS=${DEMO_MAX_SECONDS:-3600}
JSON_SERVER_VERSION=0.17.4
JSON_SERVER="$ROOT/.tools/node_modules/.bin/json-server"

say() { printf '%s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

say "==> caddy-rcns demo: json-server (installed into .tools/ when missing), then bin/caddy is built (about 2 minutes the first time), then both start"
DEMO_PORTS=("$DEMO_PORT" "$HOTEL_PORT" "$ADMIN_PORT" "$AGTP_PORT")
if [ "$IDENTITY" = oauth ]; then
	DEMO_PORTS+=("$OAUTH_PORT")
fi
for p in "${DEMO_PORTS[@]}"; do
	if port_in_use "$p"; then
		die "port 127.0.0.1:$p is already in use (set RCNS_DEMO_PORT, HOTEL_PORT, RCNS_ADMIN_PORT, RCNS_DEMO_AGTP_PORT or RCNS_DEMO_OAUTH_PORT)"
	fi
done
if [ "$IDENTITY" = oauth ] && [ ! -f "$ROOT/.tools/node_modules/oidc-provider/package.json" ]; then
	die "identity oauth needs oidc-provider in .tools/ (make deps installs it)"
fi

# 1. json-server, project-local (skipped when present).
if [ ! -x "$JSON_SERVER" ]; then
	command -v npm >/dev/null || die "npm is needed to install json-server"
	say "==> installing json-server@$JSON_SERVER_VERSION into .tools/"
	npm install --prefix "$ROOT/.tools" --no-audit --no-fund --loglevel=error "json-server@$JSON_SERVER_VERSION"
fi

# 2. Caddy with the rcns module.
say "==> building bin/caddy (the first build on a machine downloads Caddy's modules and compiles for about 2 minutes on 2 cores; later ones take seconds)"
go build -o bin/caddy ./cmd/caddy
say "==> building bin/rcns-agent (the agent CLI that signs requests)"
go build -o bin/rcns-agent ./cmd/rcns-agent

# 3. A fresh copy of the hotel database (json-server writes to it).
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rcns-demo.XXXXXX")
cp examples/hotel/db.json "$WORK/db.json"

# 3b. Every demo agent gets an Ed25519 key made for this run (never
# committed): the key stays in $WORK/keys, its public JWK goes into a copy
# of the agent's document in $WORK/agents, which identity signature loads.
say "==> making a signing key for each demo agent ($WORK/keys)"
mkdir -p "$WORK/keys" "$WORK/agents"
chmod 700 "$WORK/keys"
for doc in examples/hotel/agents/*.yaml; do
	name=$(basename "$doc" .yaml)
	jwk=$(bin/rcns-agent keygen -alg ed25519 -out "$WORK/keys/$name.pem" | sed -n 's/^jwk //p')
	[ -n "$jwk" ] || die "rcns-agent keygen printed no jwk for $name"
	{ cat "$doc"; printf 'keys:\n  - %s\n' "$jwk"; } >"$WORK/agents/$name.yaml"
done
K="$WORK/keys"
# 3c. The gateway's own Ed25519 key, made for this run too (never
# committed), signs the Attribution-Records (record_keys, through
# RCNS_RECORD_KEYS in Caddyfile.example); the manifest publishes its
# public half (server.record_keys).
say "==> making the gateway's record-signing key ($WORK/gateway/record-key.pem)"
mkdir -p "$WORK/gateway"
chmod 700 "$WORK/gateway"
RECORD_KEY="$WORK/gateway/record-key.pem"
bin/rcns-agent keygen -alg ed25519 -out "$RECORD_KEY" >/dev/null
DATA_DIR="${XDG_DATA_HOME:-$HOME/.local/share}/caddy/rcns/default"
AGENTS_DIR="examples/hotel/agents"
CADDYFILE="Caddyfile.example"
if [ "$IDENTITY" = signature ]; then
	AGENTS_DIR="$WORK/agents"
fi

# 3d. identity oauth: an authorization server for the run (its RSA signing
# key, the client secret and its config in $WORK/oauth, never committed).
# The gateway's origin is the resource its tokens are for; the confidential
# client rcns-demo-cli (client_credentials, for curl) acts as rcns-demo-agent
# (its document's copy in $WORK/agents gains oauth_clients), and a client an
# MCP host registers dynamically acts as the low-trust rcns-demo-tier3
# (unnamed_clients). The gateway's Caddyfile is Caddyfile.example with the
# oauth block added, written to $WORK/Caddyfile.
GW_ORIGIN="http://127.0.0.1:$DEMO_PORT"
ISSUER="http://127.0.0.1:$OAUTH_PORT"
OAUTH_SCOPES="rcns:negotiate hotel:read hotel:book"
OAUTH_CLIENT=rcns-demo-cli
OAUTH_UNNAMED=rcns-demo-tier3
if [ "$IDENTITY" = oauth ]; then
	say "==> making the authorization server's signing key and client secret ($WORK/oauth)"
	AGENTS_DIR="$WORK/agents"
	printf 'oauth_clients:\n  - %s\n' "$OAUTH_CLIENT" >>"$WORK/agents/rcns-demo-agent.yaml"
	mkdir -p "$WORK/oauth"
	chmod 700 "$WORK/oauth"
	OAUTH_SECRET=$(openssl rand -hex 24)
	OAUTH_PORT="$OAUTH_PORT" GW_ORIGIN="$GW_ORIGIN" OAUTH_SCOPES="$OAUTH_SCOPES" OAUTH_CLIENT="$OAUTH_CLIENT" OAUTH_SECRET="$OAUTH_SECRET" \
		node -e '
const crypto = require("node:crypto");
const e = process.env;
const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: "jwk" }), kid: "demo-" + crypto.randomBytes(4).toString("hex"), alg: "RS256", use: "sig" };
const cfg = {
  port: Number(e.OAUTH_PORT),
  keys: { keys: [jwk] },
  // The origin, and the origin with a trailing slash: MCP hosts on the
  // TypeScript SDK (mcp-remote, the Inspector) send new URL(resource).href.
  resources: { [e.GW_ORIGIN]: { scopes: e.OAUTH_SCOPES.split(" "), format: "jwt" },
    [e.GW_ORIGIN + "/"]: { scopes: e.OAUTH_SCOPES.split(" "), format: "jwt" } },
  default_resource: e.GW_ORIGIN,
  clients: [{ client_id: e.OAUTH_CLIENT, client_secret: e.OAUTH_SECRET, grant_types: ["client_credentials"],
    response_types: [], redirect_uris: [], token_endpoint_auth_method: "client_secret_basic" }],
  account: "alice",
  registration: true,
};
process.stdout.write(JSON.stringify(cfg, null, 2));
' >"$WORK/oauth/config.json"
	CADDYFILE="$WORK/Caddyfile"
	# signature_authorities applies to identity signature only (under
	# oauth it would log "has no effect"): left out of this copy.
	awk -v issuer="$ISSUER" -v resource="$GW_ORIGIN" -v unnamed="$OAUTH_UNNAMED" '
		/^[ \t]*signature_authorities / { next }
		{ print }
		/^[ \t]*identity \{\$RCNS_IDENTITY:header\}/ {
			print "\t\t# make demo, RCNS_DEMO_IDENTITY=oauth: bearer tokens from the run'"'"'s authorization server."
			print "\t\toauth {"
			print "\t\t\tissuer " issuer
			print "\t\t\tresource " resource
			print "\t\t\tunnamed_clients " unnamed
			print "\t\t}"
			n++
		}
		END { if (n != 1) exit 1 }
	' Caddyfile.example >"$CADDYFILE" || die "Caddyfile.example has no identity {\$RCNS_IDENTITY:header} line to add the oauth block after"
fi

PIDS=()
cleanup() {
	local pid
	# A second INT or TERM while cleaning up (make passes its group's
	# TERM on) must not end the script before the work folder is gone.
	trap '' INT TERM
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [ "${KEEP_DEMO_WORK:-}" = 1 ]; then
		say "demo: work folder kept: $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'say ""; say "==> stopping"; exit 0' INT TERM

# wait_for URL NAME PID LOG: poll until URL answers 2xx (at most 30 s).
wait_for() {
	local url=$1 name=$2 pid=$3 log=$4 i
	for i in $(seq 1 60); do
		if ! kill -0 "$pid" 2>/dev/null; then
			say "demo: $name exited; its log:" >&2
			tail -n 40 "$log" >&2 || true
			exit 1
		fi
		if curl -fsS -o /dev/null --max-time 1 "$url" 2>/dev/null; then
			return 0
		fi
		sleep 0.5
	done
	say "demo: $name did not answer $url within 30 s; its log:" >&2
	tail -n 40 "$log" >&2 || true
	exit 1
}

say "==> starting json-server on 127.0.0.1:$HOTEL_PORT"
# Not --quiet: json-server.log is the hotel API's request log (one line
# per request, method and path first), what reached the legacy API.
"$JSON_SERVER" --host 127.0.0.1 --port "$HOTEL_PORT" "$WORK/db.json" >"$WORK/json-server.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$HOTEL_PORT/db" json-server "${PIDS[-1]}" "$WORK/json-server.log"

if [ "$IDENTITY" = oauth ]; then
	say "==> starting the authorization server (oidc-provider) on $ISSUER"
	node scripts/oauth/authserver.mjs "$WORK/oauth/config.json" >"$WORK/authserver.out" 2>"$WORK/authserver.log" &
	PIDS+=($!)
	wait_for "$ISSUER/.well-known/oauth-authorization-server" "the authorization server" "${PIDS[-1]}" "$WORK/authserver.log"
	TOKEN_ENDPOINT=$(curl -fsS "$ISSUER/.well-known/oauth-authorization-server" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(JSON.parse(s).token_endpoint))') ||
		die "the authorization server's metadata has no token_endpoint; see $WORK/authserver.log"
fi

say "==> starting caddy on 127.0.0.1:$DEMO_PORT, agtp://127.0.0.1:$AGTP_PORT (admin 127.0.0.1:$ADMIN_PORT; identity $IDENTITY)"
# Caddy autosaves the loaded config under XDG_CONFIG_HOME: the demo's goes
# to its work folder, not over the user's own autosave.json (records stay
# in Caddy's data directory, XDG_DATA_HOME, as the README says).
RCNS_ADMIN="127.0.0.1:$ADMIN_PORT" RCNS_PORT="$DEMO_PORT" RCNS_AGTP_PORT="$AGTP_PORT" HOTEL_ADDR="127.0.0.1:$HOTEL_PORT" \
	RCNS_IDENTITY="$IDENTITY" RCNS_AGENTS="$AGENTS_DIR" RCNS_RECORD_KEYS="$RECORD_KEY" XDG_CONFIG_HOME="$WORK/config" \
	bin/caddy run --config "$CADDYFILE" --adapter caddyfile >"$WORK/caddy.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$DEMO_PORT/guests/g-1" caddy "${PIDS[-1]}" "$WORK/caddy.log"
DURABLE=1
if grep -q 'is held by another gateway' "$WORK/caddy.log"; then
	DURABLE=0
	say "demo: WARNING: another gateway (another demo?) holds this demo's records folder under ${XDG_DATA_HOME:-\$HOME/.local/share}/caddy/rcns:" >&2
	say "demo:   this one serves without durable negotiation records. Give it its own data folder: XDG_DATA_HOME=/tmp/demo2 make demo" >&2
fi

# The manifest, with the record key's public half (server.record_keys),
# kept for verify-record.
curl -fsS -X DISCOVER -o "$WORK/manifest.json" "http://127.0.0.1:$DEMO_PORT/" || die "DISCOVER / failed; see $WORK/caddy.log"

if [ "$IDENTITY" = oauth ]; then
	OAUTH_LOG_LINE=", $WORK/authserver.log"$'\n'"  authz server $ISSUER   (oidc-provider, token endpoint $TOKEN_ENDPOINT)"
fi

agent_id() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
A1=$(agent_id rcns-demo-agent)
A2=$(agent_id rcns-demo-noscope)
A3=$(agent_id rcns-demo-tier3)
OP=$(agent_id rcns-demo-operator)
GW="http://127.0.0.1:$DEMO_PORT"
NATIVE="agtp://127.0.0.1:$AGTP_PORT"
BOOK='{"parameters":{"guest_id":"g-1","property_id":"p-1","check_in":"2026-12-01","nights":2}}'

cat <<MSG

caddy-rcns hotel demo is running (identity $IDENTITY).
  HTTP door    $GW   (plain HTTP passes through to the hotel API)
  native door  $NATIVE   (AGTP/1.0 in plain text, loopback)
  MCP door     $GW/mcp
  hotel API    http://127.0.0.1:$HOTEL_PORT   (json-server, db copy in $WORK)
  logs         $WORK/caddy.log, $WORK/json-server.log${OAUTH_LOG_LINE:-}

Agents (agent_id = sha256 of the name):
  rcns-demo-agent     $A1   tier 1: rcns:negotiate hotel:read hotel:book
  rcns-demo-noscope   $A2   tier 1: hotel:read hotel:book
  rcns-demo-tier3     $A3   tier 3: rcns:negotiate hotel:read hotel:book
  rcns-demo-operator  $OP   tier 1: inspect:all rcns:negotiate hotel:read hotel:book
MSG
if [ "$IDENTITY" = signature ]; then
	cat <<MSG
Every agent request is signed (RFC 9421) by bin/rcns-agent with the agent's
key in $K; an unsigned one gets 401 signature-missing.

1. Discover: the manifest is served without Agent-ID (curl, HTTP door); an
   agent's DISCOVER / gets the directory of what it can discover (/methods,
   /patterns, /contracts: spec OP-8), here over the native AGTP/1.0 door
   (the manifest over MCP: 4.):
curl -i -X DISCOVER $GW/
bin/rcns-agent call -key $K/rcns-demo-agent.pem -agent-id $A1 DISCOVER $NATIVE/

2. Fetch a guest (Tier B: FETCH /guests/g-1 -> GET /guests/g-1), over the
   HTTP door, then over the native AGTP/1.0 door (its status line carries the
   AGTP reason phrase):
bin/rcns-agent call -key $K/rcns-demo-agent.pem -agent-id $A1 -scope hotel:read FETCH $GW/guests/g-1
bin/rcns-agent call -key $K/rcns-demo-agent.pem -agent-id $A1 -scope hotel:read FETCH $NATIVE/guests/g-1

3. Book a room: no endpoint serves BOOK /room, so the RCNS gate synthesizes a
   contract from the book-room recipe and runs it (optimistic mode: 263
   Proposal Approved); each run books again, so retry with an Idempotency-Key
   (the same KEY each time: a repeat replays the first answer and books nothing):
bin/rcns-agent call -key $K/rcns-demo-agent.pem -agent-id $A1 -scope 'rcns:negotiate, hotel:read, hotel:book' -allow-rcns BOOK $NATIVE/room '$BOOK'
KEY=\$(openssl rand -hex 16)
bin/rcns-agent call -key $K/rcns-demo-agent.pem -agent-id $A1 -scope 'hotel:read, hotel:book' -idempotency-key \$KEY BOOK $GW/room '$BOOK'

   The second call is served by the contract the first made (Tier C by pair,
   on either door: one engine, one state). rcns-demo-tier3 gets 464
   trust-tier-insufficient; rcns-demo-noscope, without rcns:negotiate, 262:
bin/rcns-agent call -key $K/rcns-demo-tier3.pem -agent-id $A3 -scope 'rcns:negotiate, hotel:read, hotel:book' -allow-rcns BOOK $GW/room '$BOOK'
bin/rcns-agent call -key $K/rcns-demo-noscope.pem -agent-id $A2 -scope 'hotel:read, hotel:book' -allow-rcns BOOK $GW/room '$BOOK'
   Plain HTTP still works: curl -i $GW/reservations

4. MCP: the same endpoints and recipe are MCP tools at $GW/mcp (Streamable
   HTTP). A signed tool call:
bin/rcns-agent call -key $K/rcns-demo-agent.pem -agent-id $A1 -scope hotel:read -H 'Accept: application/json, text/event-stream' POST $GW/mcp '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_guest","arguments":{"guest_id":"g-1"}}}'
   and the manifest (what an anonymous DISCOVER / returns; over MCP the resource rcns://manifest):
bin/rcns-agent call -key $K/rcns-demo-agent.pem -agent-id $A1 -H 'Accept: application/json, text/event-stream' POST $GW/mcp '{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"rcns://manifest"}}'

   Most MCP clients cannot sign requests: to add the gateway to one (Claude,
   an IDE, the MCP Inspector), run the demo with RCNS_DEMO_IDENTITY=header
   (Agent-ID trusted as sent, on loopback only); it then prints the client
   config.
MSG
elif [ "$IDENTITY" = oauth ]; then
	cat <<MSG
identity oauth: every agent request carries an OAuth 2.1 bearer access token
(a JWT for the resource $GW_ORIGIN) from the authorization server at
$ISSUER; the token's client names the agent:
  client $OAUTH_CLIENT (secret $OAUTH_SECRET)
      acts as rcns-demo-agent (its document's copy lists oauth_clients: [$OAUTH_CLIENT])
  any client an MCP host registers dynamically (RFC 7591)
      acts as $OAUTH_UNNAMED (unnamed_clients): tier 3, so it can read
      (fetch_guest, fetch_property) but BOOK /room (book-room) is refused
      with 464 trust-tier-insufficient
The token's scopes stand for Authority-Scope. Without a token: 401 with a
Bearer challenge naming the protected-resource metadata.

1. Discover over the HTTP door: the manifest, served without a token (with
   the token of 2., the native door's DISCOVER / gets the agent's directory
   in 2., and MCP reads the manifest in 4.):
curl -i -X DISCOVER $GW/
2. Get a token (client_credentials), then fetch a guest over the HTTP door:
TOKEN=\$(curl -s -u $OAUTH_CLIENT:$OAUTH_SECRET -d grant_type=client_credentials -d resource=$GW_ORIGIN -d 'scope=$OAUTH_SCOPES' $TOKEN_ENDPOINT | sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p'); echo "\$TOKEN"
curl -i -X FETCH -H "Authorization: Bearer \$TOKEN" $GW/guests/g-1
   and over the native door:
bin/rcns-agent call -agent-id $A1 -H "Authorization: Bearer \$TOKEN" FETCH $NATIVE/guests/g-1
   and discover (1.) over the native door, as the agent: the directory of what
   it can discover (/methods, /patterns, /contracts: spec OP-8):
bin/rcns-agent call -agent-id $A1 -H "Authorization: Bearer \$TOKEN" DISCOVER $NATIVE/
3. Book a room (RCNS synthesis, 263):
curl -i -X BOOK -H "Authorization: Bearer \$TOKEN" -H 'Allow-RCNS: true' -H 'Content-Type: application/json' -d '$BOOK' $GW/room

4. MCP: the MCP door at $GW/mcp asks for a token and points MCP hosts to
   the authorization server (protected-resource metadata), where they
   register dynamically and sign in (the demo server logs "alice" in and
   consents at once, no browser form):
   * the MCP Inspector: npx @modelcontextprotocol/inspector
     Transport Type "Streamable HTTP", URL $GW/mcp, then "Open Auth
     Settings" > "Quick OAuth Flow" (or Connect); it acts as $OAUTH_UNNAMED.
   * mcp-remote (a stdio bridge for hosts such as Claude Desktop):
     npx mcp-remote $GW/mcp
     or in a host's config: {"mcpServers": {"caddy-rcns-hotel": {"command": "npx", "args": ["mcp-remote", "$GW/mcp"]}}}
   * by hand, with the token above (acts as rcns-demo-agent):
curl -s $GW/mcp -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_guest","arguments":{"guest_id":"g-1"}}}'
     and the manifest (what an anonymous DISCOVER / returns; over MCP the resource rcns://manifest):
curl -s $GW/mcp -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"rcns://manifest"}}'
MSG
else
	cat <<MSG
identity header: Agent-ID is trusted as sent (loopback only).

1. Discover: the manifest over the HTTP door (no Agent-ID), then, as the
   agent, the directory of what it can discover (/methods, /patterns,
   /contracts: spec OP-8) over the native door (the manifest over MCP: 4.):
curl -i -X DISCOVER $GW/
bin/rcns-agent call -agent-id $A1 DISCOVER $NATIVE/
2. Fetch a guest over the HTTP door, then the native door:
curl -i -X FETCH -H 'Agent-ID: $A1' -H 'Authority-Scope: hotel:read' $GW/guests/g-1
bin/rcns-agent call -agent-id $A1 -scope hotel:read FETCH $NATIVE/guests/g-1
3. Book a room (RCNS synthesis, 263):
curl -i -X BOOK -H 'Agent-ID: $A1' -H 'Allow-RCNS: true' -H 'Authority-Scope: rcns:negotiate, hotel:read, hotel:book' -H 'Content-Type: application/json' -d '$BOOK' $GW/room
   rcns-demo-tier3 gets 464 trust-tier-insufficient; rcns-demo-noscope,
   without rcns:negotiate, 262:
curl -i -X BOOK -H 'Agent-ID: $A3' -H 'Allow-RCNS: true' -H 'Authority-Scope: rcns:negotiate, hotel:read, hotel:book' -H 'Content-Type: application/json' -d '$BOOK' $GW/room
curl -i -X BOOK -H 'Agent-ID: $A2' -H 'Allow-RCNS: true' -H 'Authority-Scope: hotel:read, hotel:book' -H 'Content-Type: application/json' -d '$BOOK' $GW/room

4. MCP: add the gateway to an MCP client's config (Claude, an IDE, the MCP
   Inspector) with the agent's identity as HTTP headers:

{"mcpServers": {"caddy-rcns-hotel": {"type": "http", "url": "$GW/mcp",
  "headers": {"Agent-ID": "$A1", "Authority-Scope": "rcns:negotiate, hotel:read, hotel:book"}}}}

   and call a tool (fetch_guest, fetch_property, reserve_reservations,
   book-room, discover_contracts, discover_patterns):
curl -s $GW/mcp -H 'Agent-ID: $A1' -H 'Authority-Scope: hotel:read' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_guest","arguments":{"guest_id":"g-1"}}}'
   and read the manifest (what an anonymous DISCOVER / returns; over MCP the resource rcns://manifest):
curl -s $GW/mcp -H 'Agent-ID: $A1' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"rcns://manifest"}}'
MSG
fi
CALL_KEY=""
if [ "$IDENTITY" = signature ]; then
	CALL_KEY="-key $K/rcns-demo-agent.pem "
elif [ "$IDENTITY" = oauth ]; then
	CALL_KEY="-H \"Authorization: Bearer \$TOKEN\" "
fi
cat <<MSG

5. Records: every answer carries an Attribution-Record (a JWS) signed with
   the gateway's Ed25519 key made for this run ($RECORD_KEY);
   its public half is in the manifest (DISCOVER /, server.record_keys),
   saved in $WORK/manifest.json. Verify an answer's record against it:
bin/rcns-agent call ${CALL_KEY}-agent-id $A1 -scope hotel:read FETCH $GW/guests/g-1 | bin/rcns-agent verify-record -keys $WORK/manifest.json -

MSG
if [ "$DURABLE" = 1 ]; then
	cat <<MSG

6. Every gate evaluation (a BOOK /room that reaches the RCNS gate, refused
   or not) is also a negotiation record, hash-chained per agent, in
   $DATA_DIR/negotiations.
   Check the chains (after a BOOK), then move a record's time back a century
   in a copy and check again: it fails, naming the file, line and agent:
bin/caddy rcns verify-log $DATA_DIR
rm -rf $WORK/changed && cp -r $DATA_DIR/negotiations $WORK/changed && sed -i '1s/"at":"20/"at":"19/' $WORK/changed/*.jsonl && bin/caddy rcns verify-log $WORK/changed
MSG
else
	cat <<MSG

6. This demo keeps no negotiation records (another gateway holds the records
   folder, see the warning above): $DATA_DIR holds the other gateway's, not
   this one's. Run it with its own XDG_DATA_HOME to see them.
MSG
fi
if [ "${KEEP_DEMO_WORK:-}" = 1 ]; then
	say "   (The work folder $WORK, with the manifest and the record key, is kept"
	say "   when the demo stops: KEEP_DEMO_WORK=1.)"
else
	say "   (The work folder $WORK, with the manifest and the record key, is removed"
	say "   when the demo stops: verify this run's records while it runs.)"
fi
say ""
say "Press Ctrl-C to stop (stops by itself after $MAX_SECONDS s)."

# Wait until interrupted, a child dies, or MAX_SECONDS pass.
end=$((SECONDS + MAX_SECONDS))
while [ "$SECONDS" -lt "$end" ]; do
	for pid in "${PIDS[@]}"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			# A terminal's Ctrl-C reaches the whole process group: caddy
			# and json-server may stop before this shell runs its INT
			# trap. Give a pending trap a moment to run (it exits 0,
			# "stopping") before calling this a crash.
			sleep 1 &
			wait $! || true
			# A shell started with SIGINT ignored (a background job of a
			# non-interactive shell, as some runners start it) cannot trap
			# it, but its children still stop on it: a child that ended
			# cleanly or on INT or TERM (status 0, 130 or 143) was
			# stopped, not crashed.
			rc=0
			wait "$pid" 2>/dev/null || rc=$?
			case $rc in 0 | 130 | 143)
				say ""
				say "==> stopping (a demo process was stopped)"
				exit 0
				;;
			esac
			# The work folder goes with cleanup unless kept, so show the
			# logs now rather than point at a folder about to vanish.
			say "demo: a demo process ($pid) exited (status $rc); the last lines of its logs:" >&2
			tail -n 20 "$WORK/json-server.log" "$WORK/caddy.log" >&2 2>/dev/null || true
			if [ "${KEEP_DEMO_WORK:-}" != 1 ]; then
				say "demo: run with KEEP_DEMO_WORK=1 to keep $WORK" >&2
			fi
			exit 1
		fi
	done
	sleep 1 &
	wait $! || true
done
say "==> $MAX_SECONDS s passed, stopping"
