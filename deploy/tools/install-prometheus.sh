#!/usr/bin/env bash
# Install promtool and the prometheus server binary from Debian's `prometheus` package.
# The tests start their own Prometheus when they need one, so the package's system
# daemon must not run: it is kept from starting during the install (policy-rc.d), then
# disabled and stopped in case it started anyway. Idempotent: skips when promtool exists.
# Needs root (CI and the dev machines run as root). Prints the promtool path.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  command -v promtool
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
# Deny service starts for the duration of the install unless a policy already exists.
POLICY=/usr/sbin/policy-rc.d
if [[ ! -e "$POLICY" ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$POLICY"
  chmod +x "$POLICY"
  trap 'rm -f "$POLICY"' EXIT
fi

# Fresh package lists: stale ones can name a .deb the mirror no longer has.
apt-get update -qq >&2
# --no-install-recommends: the node exporter (recommended) would be another daemon.
apt-get install -y -qq --no-install-recommends prometheus >&2

# Never leave the packaged server enabled or running as a system daemon.
if command -v systemctl >/dev/null 2>&1; then
  # `disable` removes the unit's symlinks even where systemd is not PID 1 (containers).
  systemctl disable prometheus >/dev/null 2>&1 || true
  if [[ -d /run/systemd/system ]]; then
    systemctl stop prometheus >/dev/null 2>&1 || true
  fi
fi
if command -v update-rc.d >/dev/null 2>&1; then
  update-rc.d prometheus disable >/dev/null 2>&1 || true
fi
if [[ -x /etc/init.d/prometheus ]] && /etc/init.d/prometheus status >/dev/null 2>&1; then
  /etc/init.d/prometheus stop >&2 || true
fi

command -v promtool
