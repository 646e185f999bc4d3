# Sourced by the device scripts that run the packed binaries (tools/device/pack.sh) from the
# repository root on the GPU machine: sets `out` ($OUT) and `bin` (the unpacked devbin), the CUDA
# library path, /work/main (where the binaries were configured and find the fixtures), and the
# default model's weights and MTP reference (unpacked from weights.tar.xz when missing).
# shellcheck shell=bash
out=${OUT:-/tmp/strata-out}
mkdir -p "$out" /tmp/strata-dev
tar xJf .dev/devbin.tar.xz -C /tmp/strata-dev
# shellcheck disable=SC2034  # read by the sourcing script
bin=/tmp/strata-dev/devbin
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ "$(pwd -P)" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$(pwd -P)" /work/main; fi
if [ -e models/default/weights.tar.xz ] && [ ! -e models/default/reference/mtp_logits.npy ]; then
  tar xJf models/default/weights.tar.xz -C models/default model.safetensors reference/mtp_logits.npy
fi
