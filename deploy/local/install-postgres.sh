#!/usr/bin/env bash
# Debian's PostgreSQL server for the postgres sink's tests (tests/integration/test_sinks.py, docs/sinks.md).
# Idempotent and quick when it is installed: it only looks for initdb. The tests start their own server in a
# temporary folder (initdb, pg_ctl) on a free loopback port; the package's own cluster is not used, and
# its service is not started here.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "PostgreSQL is missing: run 'sudo apt-get install -y --no-install-recommends postgresql'" >&2
  exit 1
fi
echo "installing Debian's PostgreSQL for the postgres sink's tests (once)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
