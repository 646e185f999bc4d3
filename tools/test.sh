#!/usr/bin/env bash
# Runs every test strata has on this machine: installs the Debian packages, builds (Release, with
# the CUDA sources when nvcc is present), runs the test suite, then the sanitizer build (clang,
# ASan/UBSan, tools/build_sanitized.sh) runs it again, and each fuzz target from that same build
# for a bounded time. Usage: tools/test.sh [--quick]   (--quick: Release suite only)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
jobs=$(nproc)
[ -x tests/tokenizer/setup.sh ] && tests/tokenizer/setup.sh
[ -x tests/server/setup.sh ] && tests/server/setup.sh
[ -x tests/grammar/setup.sh ] && tests/grammar/setup.sh

echo "== Release build and tests"
tools/build.sh
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 900

[ "${1:-}" = "--quick" ] && exit 0

echo "== ASan/UBSan build (clang; it holds the fuzz targets too) and tests"
tools/build_sanitized.sh
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 1800

if [ -x tools/run_fuzzers.sh ]; then
  echo "== fuzzing"
  tools/run_fuzzers.sh 30
fi
echo "all tests passed"
