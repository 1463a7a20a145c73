#!/usr/bin/env bash
# Install the external tools the integration tests drive, when missing: Debian's prometheus
# (prometheus + promtool). The package's own service is kept from starting (it would listen on
# every address): the tests start their own server on 127.0.0.1.
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "ensure-tools: prometheus is missing and cannot be installed here (need root + apt-get)" >&2
  exit 1
fi
policy=/usr/sbin/policy-rc.d
saved=""
if [ -e "$policy" ]; then saved=$(mktemp); cp -p "$policy" "$saved"; fi
restore() { if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi; }
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' > "$policy"
chmod +x "$policy"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
pkill -x prometheus 2>/dev/null || true
command -v prometheus >/dev/null
