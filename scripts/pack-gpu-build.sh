#!/usr/bin/env bash
# Packs the binaries of build/gpu-host (static third-party libraries) plus the few runtime libraries the GPU
# host may lack into .carry/gpu-build.tgz, which scripts/gpu-check.sh unpacks there. .carry/ is git-ignored
# and named in the device tool's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/gpu-host}
STAGE=$(mktemp -d)
mkdir -p "$STAGE/tests" "$STAGE/lib"
cp "$B/src/cli/mmserve" "$B/bench/clip_throughput" "$STAGE/"
find "$B/tests" "$B/src/kernels" -maxdepth 3 -type f -executable -name '*_test' -exec cp {} "$STAGE/tests/" \;
# libgomp is not guaranteed on the host; everything else non-system is linked statically.
cp -L "$(g++ -print-file-name=libgomp.so.1)" "$STAGE/lib/"
find "$STAGE" -type f -executable -exec strip --strip-unneeded {} \;   # keeps the carried archive small
mkdir -p .carry
tar czf .carry/gpu-build.tgz -C "$STAGE" .
rm -rf "$STAGE"
ls -la .carry/gpu-build.tgz
