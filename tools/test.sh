#!/usr/bin/env bash
# Runs every test strata has on this machine: installs the Debian packages, builds (Release),
# runs the test suite, then an ASan/UBSan build of the suite, then each fuzz target for a
# bounded time. Usage: tools/test.sh [--quick]   (--quick: Release suite only)
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

echo "== ASan/UBSan build and tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE=ON -DSTRATA_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 1800

if [ -x tools/run_fuzzers.sh ]; then
  echo "== fuzzing"
  tools/run_fuzzers.sh 30
fi
echo "all tests passed"
