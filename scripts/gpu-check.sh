#!/usr/bin/env bash
# The one script for the GPU host: unpack the build carried from the dev machine (or build, if the toolchain
# and -dev packages are there), run the tests, run the benchmarks against their baselines in the same run,
# and print a short summary table last. Results: a temp folder, archived into $OUT/gpu-check.tgz when $OUT is set.
#
# On the dev machine:  make gpu-build && scripts/pack-gpu-build.sh     (writes .carry/gpu-build.tgz)
# On the GPU host:     scripts/gpu-check.sh
# Today the engine runs on the CPU (the CUDA backend is issue 4), so the GPU host is used for its 16 cores
# and for HF transformers, the reference and baseline.
set -uo pipefail
cd "$(dirname "$0")/.."
# Results go to a work folder; when $OUT is set (the device tool), one archive of it lands there.
RES=$(mktemp -d /tmp/gpu-check.XXXX)
BIN=/tmp/mmserve-bin
rm -rf "$BIN" && mkdir -p "$BIN"
if [ -f .carry/gpu-build.tgz ]; then
  tar xzf .carry/gpu-build.tgz -C "$BIN"
else
  echo "no .carry/gpu-build.tgz: run 'make gpu-build && scripts/pack-gpu-build.sh' on the dev machine" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
summary=()

# Tests: every carried gtest binary, from the source tree (fixtures are read from tests/fixtures).
tests_failed=0
for t in "$BIN"/tests/*; do
  if "$t" --gtest_brief=1 > "$RES/$(basename "$t").log" 2>&1; then
    summary+=("test $(basename "$t"): pass")
  else
    summary+=("test $(basename "$t"): FAIL (see $(basename "$t").log)")
    tests_failed=1
  fi
done

# Benchmarks against their baselines.
THREADS=${THREADS:-$(nproc)}
if bench/run_clip_cpu_bench.sh "$BIN" "$RES/clip_cpu" "$THREADS" > "$RES/clip_cpu_table.md" 2> "$RES/clip_cpu_bench.err"; then
  summary+=("bench clip cpu ($THREADS threads): ok")
else
  summary+=("bench clip cpu: FAIL (see clip_cpu_bench.err)")
fi

echo "==================== gpu-check summary ($(date -u +%FT%TZ), ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown-commit)}) ===="
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU visible"
printf '%s\n' "${summary[@]}"
cat "$RES/clip_cpu_table.md" 2>/dev/null
echo "results: $RES"
if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-check.tgz" -C "$RES" .; fi
exit $tests_failed
