#!/usr/bin/env bash
# scripts/build-binary.sh — build the release Caddy binary with the rcns
# module: static (CGO_ENABLED=0), reproducible paths (-trimpath), no
# symbol table or DWARF (-s -w). docker/Dockerfile runs it in its build
# stage; run it natively the same way:
#
#   scripts/build-binary.sh            # writes bin/caddy
#   OUT=/tmp/caddy scripts/build-binary.sh
#
# Environment (all optional):
#   OUT          output path                  (default bin/caddy)
#   GO           go command                   (default go)
#   GOOS/GOARCH  cross-compile target         (default: the host's)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${OUT:-bin/caddy}
GO=${GO:-go}

mkdir -p "$(dirname "$OUT")"
CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' -o "$OUT" ./cmd/caddy
echo "built $OUT ($("$GO" env GOOS)/$("$GO" env GOARCH), $(du -h "$OUT" | cut -f1))"
