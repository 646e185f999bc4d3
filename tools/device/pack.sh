#!/usr/bin/env bash
# Builds strata with the CUDA backend on this (Debian 12) machine into build-cuda and packs what
# the GPU machine (Ubuntu 24.04, CUDA 13.0, no Debian -dev packages, no OpenBLAS) needs into
# .dev/devbin.tar.xz: `strata` and `strata_cuda_tests` (the tests of tests/cuda/), relinked to
# depend on nothing but glibc, libstdc++ and the GPU machine's cuBLASLt.
# Usage: tools/device/pack.sh [--no-build]   (--no-build: relink what the build folder holds)
# STRATA_BUILD_DIR (default build-cuda) and STRATA_DEVBIN (default .dev/devbin.tar.xz) pick
# another build folder and archive, e.g. for a second checkout of work in progress.
# Then, with the `device` tool, carrying .dev/devbin.tar.xz: bash tools/device/run.sh all
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
# it), cudart static; cuBLASLt comes from the GPU machine's CUDA toolkit.
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
        -e '/libcpp-httplib/d' -e '/^-lcpp-httplib$/d' -e '/libstrata_nccl\.a$/d' -e '/libnccl\.so$/d' \
        >$build/relink.args
  local args
  args=$(tr '\n' ' ' <$build/relink.args)
  # The objects go right after the compiler, ahead of the libraries.
  (cd $build && ${args%% *} "$@" ${args#* })
}
# Without `serve`: the GPU machine has no cpp-httplib (Debian's is a shared library), and no
# other command needs it.
relink strata strata_device $(cd $build && ls CMakeFiles/strata.dir/src/strata/cli/*.o | grep -v '/serve\.cpp\.o$')
relink strata_tests strata_cuda_tests $(cd $build && ls CMakeFiles/strata_tests.dir/tests/cuda/*.o)
out=$build/devbin
rm -rf "$out" && mkdir -p "$out"
cp $build/strata_device "$out/strata"
cp $build/strata_cuda_tests "$out/"
strip --strip-debug "$out/strata" "$out/strata_cuda_tests"
ldd "$out/strata" "$out/strata_cuda_tests"
tar cJf "$archive" -C $build devbin
ls -la "$archive"
