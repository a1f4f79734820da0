#!/usr/bin/env bash
# Installs Debian's Redis 7.0 binaries for the store tests into .tools/bin:
# redis-server, redis-sentinel and redis-cli (which has --cluster).
#
# Debian ships the one Redis binary in redis-tools as redis-check-rdb;
# the redis-server and redis-sentinel packages add only the names (as
# symlinks to it) and a system service. The tests start their own
# servers on loopback ports, so this installs redis-tools alone and makes
# the two names in .tools/bin: no service is installed or started.
# A redis-server already on PATH (another install) is used as it is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .tools/bin

link() { ln -sf "$1" ".tools/bin/$2"; }

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
	server=$(command -v redis-server)
	link "$server" redis-server
	if command -v redis-sentinel >/dev/null 2>&1; then
		link "$(command -v redis-sentinel)" redis-sentinel
	else
		link "$server" redis-sentinel # the binary runs as Sentinel by that name
	fi
	link "$(command -v redis-cli)" redis-cli
else
	if [ ! -x /usr/bin/redis-check-rdb ] || [ ! -x /usr/bin/redis-cli ]; then
		if [ "$(id -u)" -ne 0 ]; then
			echo "install-redis: redis-tools is not installed and this is not root; run: apt-get install redis-tools" >&2
			exit 1
		fi
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-tools >/dev/null
	fi
	link /usr/bin/redis-check-rdb redis-server
	link /usr/bin/redis-check-rdb redis-sentinel
	link /usr/bin/redis-cli redis-cli
fi

.tools/bin/redis-server --version
.tools/bin/redis-cli --version
# Redis 7 is needed (cluster create with --cluster-yes, ACL usernames).
.tools/bin/redis-server --version | grep -q ' v=7\.' || { echo "install-redis: Redis 7 is required" >&2; exit 1; }
