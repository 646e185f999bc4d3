#!/usr/bin/env bash
# Installs ajv (the JSON Schema validator) and ajv-formats into tests/grammar/node_modules for the
# grammar conformance test (tests/grammar/verdicts.mjs --check, a ctest test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if ! command -v npm >/dev/null; then
  echo "setup.sh: npm is not installed (Debian: apt-get install -y nodejs npm)" >&2
  exit 1
fi
npm ci --no-audit --no-fund
