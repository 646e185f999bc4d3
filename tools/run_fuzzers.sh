#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp) in the sanitizer build (build-asan, made by
# tools/build_sanitized.sh, which tools/test.sh has built already) and runs each one for a
# bounded time, starting from fuzz/seeds/<name>/ (plus fuzz/<name>.dict when present), where
# <name> is the target's name without "_fuzz" (safetensors_header), or else its first word
# (safetensors). New inputs accumulate in fuzz/corpus-<target>/ (git-ignored); crash
# reproducers go to build-asan/artifacts/.
#
# Usage: tools/run_fuzzers.sh [SECONDS_PER_TARGET=30] [TARGET...]
# Exits non-zero if a target fails to build or any fuzzer finds a crash, leak, timeout or OOM.
set -euo pipefail

secs="${1:-30}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [[ "$secs" -eq 0 ]]; then
  echo "usage: $0 [seconds-per-target] [target...]" >&2
  exit 2
fi
shift || true

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-asan"

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for src in "$root"/fuzz/*_fuzz.cpp; do
    [[ -e "$src" ]] && targets+=("$(basename "$src" .cpp)")
  done
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "no fuzz/*_fuzz.cpp targets" >&2
  exit 2
fi

echo "== building ${targets[*]} in $build"
"$root/tools/build_sanitized.sh" "${targets[@]}"

mkdir -p "$build/artifacts"
failed=()
for target in "${targets[@]}"; do
  name="${target%_fuzz}"
  [[ -d "$root/fuzz/seeds/$name" || -f "$root/fuzz/$name.dict" ]] || name="${name%%_*}"
  corpus="$root/fuzz/corpus-$target"
  mkdir -p "$corpus"
  dirs=("$corpus")
  [[ -d "$root/fuzz/seeds/$name" ]] && dirs+=("$root/fuzz/seeds/$name")
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$build/artifacts/$target-")
  [[ -f "$root/fuzz/$name.dict" ]] && args+=(-dict="$root/fuzz/$name.dict")
  log="$build/$target.log"

  echo "== $target: ${secs}s from ${dirs[*]#$root/}"
  rc=0
  "$build/$target" "${args[@]}" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "!! $target exited with $rc; the end of $log:"
    tail -n 60 "$log"
    failed+=("$target")
  else
    grep -E "^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::new_units_added" \
      "$log" || true
  fi
done

if [[ ${#failed[@]} -ne 0 ]]; then
  echo "FAILED: ${failed[*]} (reproducers in $build/artifacts/)"
  exit 1
fi
echo "all ${#targets[@]} fuzz targets ran ${secs}s without a finding"
