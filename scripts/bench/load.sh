#!/usr/bin/env bash
# scripts/bench/load.sh — the load comparison of docs/performance.md.
#
# Builds Caddy with the rcns module (and the (bd) reference handler,
# scripts/bench/caddy), the bench upstream (go-httpbin plus
# fixed JSON routes) and the driver, installs vegeta v12.13.0 into .tools/
# when missing, then runs scripts/bench/loadcmp on loopback. Every run is
# bounded in requests and time; the whole comparison is bounded by
# -max-total (default 40m) and takes about 9 minutes with its default
# of 5 rounds (make bench runs 4: about 7 minutes). Results: report.md, results.json, loadcmp.log and profiles/
# in -out (default: a new temp dir). Extra arguments go to loadcmp, e.g.
#
#   scripts/bench/load.sh -rounds 3 -only c,d
#   scripts/bench/load.sh -out /tmp/bench-results -keep-work
#
# Binaries are built into $BENCH_BIN (default: a temp dir removed at exit),
# not bin/, so a run does not replace a bin/caddy someone else is using.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
GO=${GO:-go}
VEGETA_VERSION=v12.13.0
VEGETA=${VEGETA:-$ROOT/.tools/bin/vegeta}
VEGETA_LABEL=${VEGETA_LABEL:-}
[ "$VEGETA" = "$ROOT/.tools/bin/vegeta" ] && VEGETA_LABEL=${VEGETA_LABEL:-$VEGETA_VERSION (go install)}

for tool in openssl "$GO"; do
	command -v "$tool" >/dev/null || { echo "load.sh: $tool is required" >&2; exit 1; }
done
if [ ! -x "$VEGETA" ]; then
	if [ "$VEGETA" != "$ROOT/.tools/bin/vegeta" ]; then
		echo "load.sh: VEGETA=$VEGETA is not an executable file" >&2
		exit 1
	fi
	echo "==> installing vegeta $VEGETA_VERSION into .tools/bin"
	GOBIN="$ROOT/.tools/bin" "$GO" install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
fi

if [ -z "${BENCH_BIN:-}" ]; then
	BENCH_BIN=$(mktemp -d "${TMPDIR:-/tmp}/rcns-bench-bin.XXXXXX")
	trap 'rm -rf "$BENCH_BIN"' EXIT
fi
echo "==> building into $BENCH_BIN"
"$GO" build -o "$BENCH_BIN/caddy" ./scripts/bench/caddy # cmd/caddy plus the (bd) reference handler
"$GO" build -o "$BENCH_BIN/upstream" ./scripts/bench/upstream
"$GO" build -o "$BENCH_BIN/loadcmp" ./scripts/bench/loadcmp

# loadcmp runs in the background so that a SIGTERM or SIGINT sent to this
# script (timeout, CI, kill) reaches it: it then stops every process it
# started. The script waits for it and exits with its status.
"$BENCH_BIN/loadcmp" -caddy "$BENCH_BIN/caddy" -upstream "$BENCH_BIN/upstream" -vegeta "$VEGETA" -vegeta-version "$VEGETA_LABEL" \
	-caddyfile scripts/bench/Caddyfile -docs scripts/bench/docs "$@" &
LOADCMP=$!
trap 'kill -TERM "$LOADCMP" 2>/dev/null' TERM INT
set +e
while :; do
	wait "$LOADCMP"
	rc=$?
	kill -0 "$LOADCMP" 2>/dev/null || break # wait returned for a trapped signal: wait again
done
exit "$rc"
