#!/usr/bin/env bash
# Packs the binaries of build/gpu-host (static third-party libraries) plus the few runtime libraries the GPU
# host may lack into .carry/gpu-build.tgz, which scripts/gpu-check.sh unpacks there. .carry/ is git-ignored
# and named in the device tool's `carry`.
#   scripts/pack-gpu-build.sh                      build/gpu-host (make gpu-build: static third-party libraries)
#   scripts/pack-gpu-build.sh build/cpu-release    the everyday build (it compiles the CUDA backend too when nvcc is
#                                                  here): every non-system shared library ldd names travels in lib/,
#                                                  which saves the second (static) build when only code changed
#   PACK=gpu GPU_EXTRA="sam_cuda_test"             only the GPU test binaries (+ these)
#   PACK=only GPU_EXTRA="clip_batch_cuda_test"     only these test binaries (a call that runs a stage or two)
#   BENCHES="kernels_cuda_bench"                   only these GPU benches (default: all five)
#   BASELINE=DIR                                   also DIR's mmserve, kernels_cuda_bench and llama_gpu_bench (binaries of an earlier
#                                                  commit, same libraries) as base/: gpu-check's before/after runs
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/gpu-host}
STAGE=$(mktemp -d)
mkdir -p "$STAGE/tests" "$STAGE/lib"
# NO_CLI=1: without mmserve and clip_throughput (a call that runs kernel tests and benches only).
[ "${NO_CLI:-0}" = 1 ] || cp "$B/src/cli/mmserve" "$B/bench/clip_throughput" "$STAGE/"
# BENCHES="kernels_cuda_bench": only these of the GPU benches (the carried size is limited).
for b in ${BENCHES:-kernels_cuda_bench whisper_gpu_bench sam_gpu_bench llama_gpu_bench llava_gpu_bench}; do
  for d in "$B/src/kernels" "$B/bench"; do [ -x "$d/$b" ] && cp "$d/$b" "$STAGE/"; done
done
# PACK=gpu: only the binaries with GPU tests (the device tool carries at most 64 MiB with the tree).
if [ "${PACK:-all}" = only ]; then
  for t in ${GPU_EXTRA:-}; do
    find "$B/tests" "$B/src/kernels" -maxdepth 3 -type f -executable -name "$t" -exec cp {} "$STAGE/tests/" \;
  done
elif [ "${PACK:-all}" = gpu ]; then
  for t in core_cuda_test kernels_cuda_test clip_cuda_conformance_test clip_cuda_tp_test nccl_comm_test whisper_cuda_test whisper_cuda_tp_test whisper_executor_cuda_test sam_cuda_test llama_cuda_test llava_cuda_test topology_gpu_test server_e2e_test audio_server_e2e_test cli_e2e_test ${GPU_EXTRA:-}; do
    find "$B/tests" "$B/src/kernels" -maxdepth 3 -type f -executable -name "$t" -exec cp {} "$STAGE/tests/" \;
  done
else
  find "$B/tests" "$B/src/kernels" -maxdepth 3 -type f -executable -name '*_test' -exec cp {} "$STAGE/tests/" \;
fi
# libgomp is not guaranteed on the host; everything else non-system is linked statically.
cp -L "$(g++ -print-file-name=libgomp.so.1)" "$STAGE/lib/"
# The server's HTTP and YAML libraries (Debian shared objects; Ubuntu 24.04 has other sonames or none).
# ... and the audio tests' libsndfile with its codecs (Debian ships them shared only).
for bin in "$STAGE"/mmserve "$STAGE"/tests/*; do
  [ -f "$bin" ] || continue
  for lib in $(ldd "$bin" | awk '/libyaml-cpp|libcpp-httplib|libbrotli|libsndfile|libsamplerate|libvorbis|libogg|libFLAC|libopus|libmpg123|libmp3lame/ {print $3}'); do
    cp -L "$lib" "$STAGE/lib/"
  done
done
# A dynamically linked build (build/cpu-release): carry every shared library that is neither glibc's, the C++
# runtime's (the host's are newer), the CUDA toolkit's (the host has CUDA 13.0) nor the driver's.
if [ "$B" != build/gpu-host ]; then
  for bin in "$STAGE"/* "$STAGE"/tests/* ${BASELINE:+"$BASELINE"/mmserve "$BASELINE"/kernels_cuda_bench "$BASELINE"/llama_gpu_bench}; do
    [ -f "$bin" ] && [ -x "$bin" ] || continue
    for lib in $(ldd "$bin" | awk '$3 ~ /^\// {print $3}' | grep -v '^/usr/local/cuda' | grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcuda|ld-linux)[.-]'); do
      [ -e "$STAGE/lib/$(basename "$lib")" ] || cp -L "$lib" "$STAGE/lib/"
    done
  done
fi
if [ -n "${BASELINE:-}" ]; then
  mkdir -p "$STAGE/base"
  for f in mmserve kernels_cuda_bench llama_gpu_bench; do [ -x "$BASELINE/$f" ] && cp "$BASELINE/$f" "$STAGE/base/"; done
fi
find "$STAGE" -type f -executable -exec strip --strip-unneeded {} \;   # keeps the carried archive small
mkdir -p .carry
XZ_OPT=-9 tar cJf .carry/gpu-build.tgz -C "$STAGE" .   # xz: the carried size is limited
rm -rf "$STAGE"
ls -la .carry/gpu-build.tgz
