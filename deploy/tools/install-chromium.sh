#!/usr/bin/env bash
# Install headless Chromium and its driver from Debian's packages (`chromium`, `chromium-driver`)
# for the console's browser tests (tests/e2e/test_console_browser.py), and axe-core (the
# accessibility engine those tests run in the page) from the npm registry into .local/tools.
# Nothing is downloaded at test time: Selenium is pointed at /usr/bin/chromedriver and runs
# offline. Idempotent: skips what is there. Needs root for apt (CI and the dev machines run as
# root). Prints the chromium path.
set -euo pipefail

AXE_VERSION="${AXE_VERSION:-4.14.1}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
AXE_DIR="$ROOT/.local/tools/axe-core-$AXE_VERSION"

if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2   # fresh package lists: stale ones can name a .deb the mirror no longer has
  apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >&2
fi

if [[ ! -f "$AXE_DIR/axe.min.js" ]]; then
  if ! command -v npm >/dev/null; then
    echo "install-chromium: npm is not on PATH; install Debian's npm to fetch axe-core $AXE_VERSION" >&2
    exit 1
  fi
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "axe-core@$AXE_VERSION" >/dev/null && tar -xzf "axe-core-$AXE_VERSION.tgz")
  mkdir -p "$AXE_DIR"
  cp "$tmp/package/axe.min.js" "$tmp/package/LICENSE" "$AXE_DIR/"
fi

echo /usr/bin/chromium
