#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .dev/devbin.tar.xz carried along (made by
# tools/device/pack.sh). Usage: bash tools/device/run.sh tests|golden|bench|all [extra bench flags]
# or bash tools/device/run.sh serve [serve-mode flags] (see run_serve below).
# Logs and results go to $OUT (the device tool brings them back).
set -uo pipefail
mode=${1:-all}
shift || true
out=${OUT:-/tmp/strata-out}
mkdir -p "$out" /tmp/strata-dev
tar xJf "${STRATA_DEVBIN:-.dev/devbin.tar.xz}" -C /tmp/strata-dev
bin=/tmp/strata-dev/devbin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# The binaries were configured in /work/main and find the test fixtures through that path.
if [ "$(pwd -P)" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$(pwd -P)" /work/main; fi
# strata finds devbin/lib (cpp-httplib, brotli; pack.sh) through its rpath, $ORIGIN/lib; libssl.so.3,
# libcrypto.so.3 and libz.so.1 must be this machine's (the ldd check below says when one is missing).
ldd "$bin/strata" "$bin/strata_cuda_tests" | grep "not found" && echo "run.sh: missing shared libraries" >&2

health() {  # health PORT: GET /health on 127.0.0.1:PORT answers 200 (bash's /dev/tcp, no curl)
  (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'GET /health HTTP/1.0\r\n\r\n' >&3 && timeout 5 head -n 1 <&3) 2>/dev/null |
    grep -q '^HTTP/1\.[01] 200'
}

# run.sh serve [--model DIR] [--port N] [--concurrency "1 4 16"] [--serve-flags "FLAGS"] [bench flags]
# Starts `strata serve --device cuda` on 127.0.0.1:PORT (default 8000) in the background (its log:
# $OUT/serve.log), waits up to 300 s for /health, runs `strata bench serve` once per concurrency
# (--max-concurrency N, --num-prompts 4*N but at least 16 unless the bench flags give one; bench
# flags default to random prompts of 1024 tokens in, 128 out, eos ignored) writing
# $OUT/bench_serve_cN.json and .log, then stops the server. The model defaults to models/default
# (its weights unpacked from weights.tar.xz when missing); --serve-flags are engine or server
# flags, e.g. "--load-format dummy --max-num-seqs 64".
run_serve() {
  local model=models/default port=8000 concurrency="1 4 16" serve_flags="" bench=()
  while [ $# -gt 0 ]; do
    case $1 in
      --model|--port|--concurrency|--serve-flags)
        [ $# -ge 2 ] || { echo "run.sh serve: $1 needs a value" >&2; return 1; }
        case $1 in
          --model) model=$2 ;; --port) port=$2 ;; --concurrency) concurrency=$2 ;; --serve-flags) serve_flags=$2 ;;
        esac
        shift 2 ;;
      *) bench+=("$1"); shift ;;
    esac
  done
  [ ${#bench[@]} -gt 0 ] || bench=(--dataset-name random --random-input-len 1024 --random-output-len 128 --ignore-eos)
  if [ "$model" = models/default ] && [ ! -e models/default/model.safetensors ]; then
    tar xJf models/default/weights.tar.xz -C models/default model.safetensors || return 1
  fi
  # shellcheck disable=SC2086  # serve_flags are separate words
  "$bin/strata" serve --device cuda --model "$model" --host 127.0.0.1 --port "$port" $serve_flags \
    >"$out/serve.log" 2>&1 &
  local pid=$! up=0 rc=0
  for _ in $(seq 600); do
    kill -0 $pid 2>/dev/null || break
    if health "$port"; then up=1; break; fi
    sleep 0.5
  done
  if [ $up = 1 ]; then
    for c in $concurrency; do
      local n=()
      case " ${bench[*]} " in *" --num-prompts "*) ;; *) n=(--num-prompts $((c * 4 > 16 ? c * 4 : 16))) ;; esac
      echo "== bench serve, max concurrency $c"
      "$bin/strata" bench serve --port "$port" "${bench[@]}" "${n[@]}" --max-concurrency "$c" \
        --result-file "$out/bench_serve_c$c.json" 2>&1 | tee "$out/bench_serve_c$c.log" | tail -40
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    done
  else
    echo "run.sh serve: strata serve did not answer /health on port $port:" >&2
    tail -30 "$out/serve.log" >&2
    rc=1
  fi
  kill -TERM $pid 2>/dev/null
  for _ in $(seq 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -KILL $pid 2>/dev/null
  wait $pid
  echo "strata serve exit status $?" >>"$out/serve.log"
  return $rc
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
status=0
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  timeout 300 "$bin/strata_cuda_tests" --gtest_filter='CudaDense*:CudaMixer*' 2>&1 | tee "$out/op_tests.log" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$mode" = golden ] || [ "$mode" = all ]; then
  timeout 150 "$bin/strata_cuda_tests" --gtest_filter='Fixtures/CudaGolden*' 2>&1 | tee "$out/golden.log" | \
    grep -E "cuda |OK|FAILED|PASSED|Failure|expected|Which|max" | head -80
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  timeout 240 "$bin/strata" bench --roofline --model tools/device/qwen3_5_35b_a3b --load-format dummy \
    --out "$out/roofline.md" "$@" 2>&1 | tee "$out/bench.log" | tail -70
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$mode" = serve ]; then
  run_serve "$@" || status=1
fi
exit $status
