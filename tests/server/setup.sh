#!/usr/bin/env bash
# Installs the official openai npm client into tests/server/node_modules for the end-to-end
# tests of strata serve (tests/server/e2e.test.mjs, tests/server/load.test.mjs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if ! command -v npm >/dev/null; then
  echo "setup.sh: npm is not installed (Debian: apt-get install -y nodejs npm)" >&2
  exit 1
fi
npm ci --no-audit --no-fund
