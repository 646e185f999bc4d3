#!/usr/bin/env bash
# The main job: installs the Debian packages, builds strata, and generates with the bundled
# default model. Extra arguments are passed to `strata generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
tools/build.sh
if [ -f models/default/config.json ] && [ -f models/default/tokenizer.json ]; then
  exec build/strata generate --model models/default --prompt "${PROMPT:-The kernel}" --max-tokens 48 "$@"
fi
# No trained default model yet: a golden fixture model (random weights) from token ids.
exec build/strata generate --model tests/fixtures/qwen3_5_moe_tiny --ids 11,42,7,99,3 \
  --max-tokens 16 --temperature 0 --ignore-eos --print-ids "$@"
