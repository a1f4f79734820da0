#!/usr/bin/env bash
# Installs promtool (from Debian's prometheus package) into .tools/bin,
# without installing or starting the Prometheus server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .tools/bin
if command -v promtool >/dev/null 2>&1; then
	ln -sf "$(command -v promtool)" .tools/bin/promtool
	exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(
	cd "$work"
	apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus; }
	dpkg -x prometheus_*.deb root
)
cp "$work/root/usr/bin/promtool" .tools/bin/promtool
.tools/bin/promtool --version | sed -n 1p
