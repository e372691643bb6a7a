#!/usr/bin/env bash
# Saturation throughput of `mmserve serve` with dynamic batching vs without, in one run (SPEC 2.4 / issue 3
# item 10a; target >= 3x). One server, one repository holding the demo CLIP twice: "clip-batched"
# (max_batch_size 64, max_queue_delay_ms 5) and "clip-b1" (max_batch_size 1). For each request kind (texts,
# 320x240 PNG images, and the built-in mix with 1920x1080 JPEGs) each model is driven open-loop far above its
# capacity (RATE req/s over CONNECTIONS connections, so the server always has work queued); ok/s is then its
# saturation throughput. Runs alternate batched / b1 per kind so drift hits both alike. The mean engine batch
# size of each run comes from the server's mmserve_batch_size histogram (/metrics before and after).
#
#   bench/server_batching.sh [BUILD_DIR (default build/cpu-release)] [OUT_DIR (default build/bench-results/server)]
#   env: DURATION (s, default 10), RATE (default 6000), CONNECTIONS (default 64), KINDS (default "text image mix"),
#   ARCH (demo-model --architecture: small, the demo, or vit-b32), ENGINE_THREADS (mmserve.yaml threads, default
#   1: on 2 cores OpenMP barriers of a 2-thread engine stall whenever an HTTP or preprocessing thread holds the
#   other core, which punishes batch 1 far more than batch 64 and makes the ratio meaningless),
#   HTTP_THREADS (default 0 = the server default, max(512, 16 x cores) since 65b4147; was 128: the server's HTTP workers wait for their request's answer, so fewer workers
#   than connections would cap the batch size at the worker count; 0 = the server default)
# Writes OUT_DIR/batching_*.json (one `mmserve bench` report per run) and OUT_DIR/server_batching.json
# (keyed by commit), and prints the table with the ratios. Figures: docs/perf/server_cpu.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMSERVE=$(realpath "${1:-$ROOT/build/cpu-release}/src/cli/mmserve")
OUT=$(realpath -m "${2:-$ROOT/build/bench-results/server}")
DURATION=${DURATION:-10}
RATE=${RATE:-6000}
CONNECTIONS=${CONNECTIONS:-64}
KINDS=${KINDS:-text image mix}
ARCH=${ARCH:-small}
ENGINE_THREADS=${ENGINE_THREADS:-1}
HTTP_THREADS=${HTTP_THREADS:-0}
mkdir -p "$OUT"
# shellcheck source=bench/server_lib.sh
source "$ROOT/bench/server_lib.sh"
REPO=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-bench-repo.XXXXXX")
trap 'srv_cleanup; rm -rf "$REPO"' EXIT

COMMON=$'queue_size: 512\nthreads: '"$ENGINE_THREADS"
make_model "$REPO" clip-batched "$ARCH" $'max_batch_size: 64\nmax_queue_delay_ms: 5\n'"$COMMON"
make_model "$REPO" clip-b1 "$ARCH" $'max_batch_size: 1\nbatch_buckets: [1]\nmax_queue_delay_ms: 0\n'"$COMMON"
cat >"$OUT/batching_text.yaml" <<'EOF'
classes:
  - {name: text, kind: text, api: kserve}
EOF
cat >"$OUT/batching_image.yaml" <<'EOF'
classes:
  - {name: image, kind: image, api: kserve, image_size: [320, 240], image_format: png}
EOF

srv_start batching "$REPO" --http-threads "$HTTP_THREADS"
echo "server $SRV_URL ($MMSERVE); warming up" >&2
for model in clip-batched clip-b1; do
  bench_run "batching_warmup_$model" --model "$model" --rate 200 --duration 2 --connections "$CONNECTIONS"
done
for kind in $KINDS; do
  profile=()
  [ "$kind" != mix ] && profile=(--profile "$OUT/batching_$kind.yaml")
  for model in clip-batched clip-b1; do
    echo "running $kind on $model for $DURATION s at $RATE req/s offered" >&2
    curl -s "$SRV_URL/metrics" >"$OUT/batching_${kind}_$model.metrics.before"
    bench_run "batching_${kind}_$model" --model "$model" "${profile[@]}" --rate "$RATE" --duration "$DURATION" \
      --connections "$CONNECTIONS"
    curl -s "$SRV_URL/metrics" >"$OUT/batching_${kind}_$model.metrics.after"
  done
done
srv_stop

"$PY" "$ROOT/bench/server_summary.py" batching "$OUT" --commit "$(commit_id)" --host "$(host_desc)" --kinds "$KINDS" \
  --note "arch $ARCH, engine threads $ENGINE_THREADS, http threads $HTTP_THREADS, rate $RATE, \
$CONNECTIONS connections, $DURATION s"
