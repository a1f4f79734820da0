#!/usr/bin/env bash
# Installs Debian's chromium for the operator page's browser test
# (integration/oppage_test.go: headless DOM dumps, screenshots, and the
# revoke form driven over the DevTools protocol) and links it into
# .tools/bin/chromium.
#
# A chromium already on PATH is used as it is. Otherwise, as root, the
# Debian package is installed into the system (apt-get install chromium;
# no service comes with it); as another user the script stops and says
# what to run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .tools/bin

bin=""
for name in chromium chromium-browser; do
	if command -v "$name" >/dev/null 2>&1; then
		bin=$(command -v "$name")
		break
	fi
done
if [ -z "$bin" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-chromium: chromium is not installed and this is not root; run: apt-get install chromium" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
	bin=/usr/bin/chromium
fi
ln -sf "$bin" .tools/bin/chromium
.tools/bin/chromium --version
