#!/usr/bin/env bash
# Configures and builds the sanitizer build in build-asan: clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, and the libFuzzer coverage hooks, so the one build holds both the
# test suite and the fuzz targets (tools/test.sh runs the first, tools/run_fuzzers.sh the second).
# Usage: tools/build_sanitized.sh [TARGET...]   (no target: everything)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-asan"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_SANITIZE=ON -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF >/dev/null
if [[ $# -eq 0 ]]; then
  cmake --build "$build" -j"$(nproc)"
else
  cmake --build "$build" -j"$(nproc)" --target "$@"
fi
