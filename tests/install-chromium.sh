#!/usr/bin/env bash
# Debian's headless chromium for the dashboard's browser test (tests/e2e/test_dashboard.py, docs/api.md).
# Idempotent and quick when it is installed: it only looks for the binary. Playwright drives this
# system chromium (never `playwright install`: nothing is downloaded at test time).
set -euo pipefail
for candidate in "${DOCSTREAM_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then exit 0; fi
done
if [ "$(id -u)" != 0 ]; then
  echo "chromium is missing: run 'sudo apt-get install -y --no-install-recommends chromium' (or set DOCSTREAM_CHROMIUM)" >&2
  exit 1
fi
echo "installing Debian's chromium for the browser tests (once)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
