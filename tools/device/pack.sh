#!/usr/bin/env bash
# Builds strata with the CUDA backend on this (Debian 12) machine into build-cuda and packs what
# the GPU machine (Ubuntu 24.04, CUDA 13.0, no Debian -dev packages, no OpenBLAS) needs into
# .dev/devbin.tar.xz: `strata` and `strata_cuda_tests` (the tests of tests/cuda/), relinked to
# depend on nothing but glibc, libstdc++ and the GPU machine's cuBLASLt, plus, for `strata serve`
# and `strata bench serve`, Debian's cpp-httplib in devbin/lib (see below).
# Usage: tools/device/pack.sh [--no-build]   (--no-build: relink what the build folder holds)
# STRATA_BUILD_DIR (default build-cuda) and STRATA_DEVBIN (default .dev/devbin.tar.xz) pick
# another build folder and archive, e.g. for a second checkout of work in progress.
# Then, with the `device` tool, carrying .dev/devbin.tar.xz: bash tools/device/run.sh all
# (when the working tree and the archive pass the 64 MiB a call carries: tools/device/slim_tree.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
arch=${CUDA_ARCH:-90a}
build=${STRATA_BUILD_DIR:-build-cuda}
archive=${STRATA_DEVBIN:-.dev/devbin.tar.xz}
if [ "${1:-}" != --no-build ]; then
  cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
  cmake --build $build -j2 --target strata
  cmake --build $build -j2 --target strata_tests -- -k || true  # only tests/cuda objects are needed
fi
# Relink both binaries without shared Debian libraries, so that they fit a device call (64 MiB
# with the working tree): pcre2 and libgomp static, OpenBLAS replaced by tools/device/blas_shim.c
# (plain loops: the GPU machine has no OpenBLAS, and on it only the tests' CPU references use
# it), cudart static; cuBLASLt comes from the GPU machine's CUDA toolkit. Debian ships cpp-httplib
# only as a shared library (no .a, and its httplib.h is the declarations, not header-only), so
# `strata` keeps it and finds it in devbin/lib through an rpath of $ORIGIN/lib: a DT_RPATH
# (--disable-new-dtags), which, unlike DT_RUNPATH, also serves the dependencies of
# libcpp-httplib, copied there too (brotli: Debian's version; libssl 3, libcrypto 3 and libz 1
# are the GPU machine's own, ABI-compatible sonames, left out to stay within a device call). The CUDA tests do not need it.
gcc -O2 -c tools/device/blas_shim.c -o $build/blas_shim.o
relink() {  # relink TARGET OUTPUT OBJECTS...
  local target=$1 output=$2
  shift 2
  tr ' ' '\n' <"$build/CMakeFiles/$target.dir/link.txt" | grep -v '\.o$' | grep -v -- '-Wl,-rpath' | \
    sed -e "s|^$target\$|$output|" \
        -e "s|.*/libopenblas\.so\$|$PWD/$build/blas_shim.o|" \
        -e "s|.*/libpcre2-8\.so\$|$(gcc -print-file-name=libpcre2-8.a)|" \
        -e "s|.*/libgomp\.so\$|$(gcc -print-file-name=libgomp.a)|" \
        -e '/.*\/libcudart\.so$/d' -e '/.*\/libcublas\.so$/d' \
        -e '/libstrata_nccl\.a$/d' -e '/libnccl\.so$/d' \
        >$build/relink.args
  if [ "$target" = strata ]; then
    # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
    echo '-Wl,--disable-new-dtags,-rpath,$ORIGIN/lib' >>$build/relink.args
  else
    sed -i -e '/libcpp-httplib/d' -e '/^-lcpp-httplib$/d' $build/relink.args
  fi
  local args
  args=$(tr '\n' ' ' <$build/relink.args)
  # The objects go right after the compiler, ahead of the libraries.
  (cd $build && ${args%% *} "$@" ${args#* })
}
relink strata strata_device $(cd $build && ls CMakeFiles/strata.dir/src/strata/cli/*.o)
relink strata_tests strata_cuda_tests $(cd $build && ls CMakeFiles/strata_tests.dir/tests/cuda/*.o)
out=$build/devbin
rm -rf "$out" && mkdir -p "$out"
cp $build/strata_device "$out/strata"
cp $build/strata_cuda_tests "$out/"
strip --strip-all "$out/strata" "$out/strata_cuda_tests"
# libcpp-httplib and what it needs besides glibc, libstdc++ and libgcc (which the GPU machine has).
mkdir -p "$out/lib"
httplib=$(ldd $build/strata_device | awk '/libcpp-httplib/ {print $3}')
[ -f "$httplib" ] || { echo "pack.sh: strata_device does not link libcpp-httplib" >&2; exit 1; }
cp -L "$httplib" "$out/lib/"
ldd "$httplib" | awk '$3 ~ /^\// {print $3}' | \
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libssl|libcrypto|libz)\.so' | xargs -r cp -L -t "$out/lib/"
ldd "$out/strata" "$out/strata_cuda_tests"
XZ_OPT=-9e tar cJf "$archive" -C $build devbin
ls -la "$archive"
