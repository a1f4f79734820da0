#!/usr/bin/env bash
# Installs promtool and the Prometheus server binary (both from Debian's
# prometheus package) into .tools/bin, without installing the package or
# starting anything: promtool checks and unit-tests the alert rules, the
# server is started by TestDashboardQueriesResolve on a loopback port.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .tools/bin
missing=()
for bin in promtool prometheus; do
	if [ -x ".tools/bin/$bin" ]; then
		continue
	fi
	if command -v "$bin" >/dev/null 2>&1; then
		ln -sf "$(command -v "$bin")" ".tools/bin/$bin"
	else
		missing+=("$bin")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	(
		cd "$work"
		apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus; }
		dpkg -x prometheus_*.deb root
	)
	for bin in "${missing[@]}"; do
		cp "$work/root/usr/bin/$bin" ".tools/bin/$bin"
	done
fi
.tools/bin/promtool --version | sed -n 1p
.tools/bin/prometheus --version | sed -n 1p
