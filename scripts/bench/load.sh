#!/usr/bin/env bash
# scripts/bench/load.sh — the load comparison behind docs/performance.md.
#
# Builds the bench's Caddy (scripts/bench/caddy: cmd/caddy plus the floor
# site's bench_redis_floor handler), the bench upstream and the driver
# (scripts/bench/loadcmp), then runs the driver on loopback.
# Every run is bounded in requests and time, and the whole comparison by
# loadcmp's -max-total (default 45m); with the defaults it takes about
# 20 minutes. Results go to -out (default: a new temp dir): results.json,
# report.md (the page), loadcmp.log, profiles/. Arguments go to loadcmp:
#
#   scripts/bench/load.sh -only d,f -rounds 3
#   scripts/bench/load.sh -out /tmp/bench -page docs/performance.md
#
# Binaries are built into $BENCH_BIN (default: a temp dir removed at
# exit), not bin/, so a run does not replace a bin/caddy in use.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
GO=${GO:-go}
for tool in openssl "$GO"; do
	command -v "$tool" >/dev/null || { echo "load.sh: $tool is required" >&2; exit 1; }
done

if [ -z "${BENCH_BIN:-}" ]; then
	BENCH_BIN=$(mktemp -d "${TMPDIR:-/tmp}/rcns-bench-bin.XXXXXX")
	trap 'rm -rf "$BENCH_BIN"' EXIT
fi
echo "==> building into $BENCH_BIN"
"$GO" build -o "$BENCH_BIN/caddy" ./scripts/bench/caddy # cmd/caddy + the floor site's handler
"$GO" build -o "$BENCH_BIN/upstream" ./scripts/bench/upstream
"$GO" build -o "$BENCH_BIN/loadcmp" ./scripts/bench/loadcmp

# What is measured, for the page: the commit, "+ changes" when the tree
# differs from it.
SOURCE="commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD -- . ':!docs/performance.md' 2>/dev/null || SOURCE="$SOURCE + uncommitted changes"

# The redis site's redis-server: the one `make deps` installs
# (scripts/install-redis.sh), else one on PATH.
REDIS_SERVER=redis-server
[ -x "$ROOT/.tools/bin/redis-server" ] && REDIS_SERVER="$ROOT/.tools/bin/redis-server"
command -v "$REDIS_SERVER" >/dev/null || { echo "load.sh: redis-server is required (make deps installs it)" >&2; exit 1; }

# The oauth site's authorization server: scripts/oauth/authserver.mjs on
# node, with oidc-provider from .tools/node_modules (make deps). Only
# needed when an oauth scenario runs; loadcmp says so if it is missing.
NODE=${NODE:-node}

# loadcmp runs in the background so that a SIGTERM or SIGINT sent to this
# script reaches it: it then stops every process it started. The script
# waits for it and exits with its status.
"$BENCH_BIN/loadcmp" -caddy "$BENCH_BIN/caddy" -upstream "$BENCH_BIN/upstream" -redis-server "$REDIS_SERVER" \
	-node "$NODE" -authserver scripts/oauth/authserver.mjs -caddyfile scripts/bench/Caddyfile -docs scripts/bench/docs -source "$SOURCE" "$@" &
LOADCMP=$!
trap 'kill -TERM "$LOADCMP" 2>/dev/null' TERM INT
set +e
while :; do
	wait "$LOADCMP"
	rc=$?
	kill -0 "$LOADCMP" 2>/dev/null || break # wait returned for a trapped signal: wait again
done
exit "$rc"
