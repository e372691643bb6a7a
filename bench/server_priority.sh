#!/usr/bin/env bash
# High-priority latency under a low-priority flood, in one run (issue 3 item 10b; target: high-priority P99
# under load at most 2x its unloaded P99, with --policy qos). The demo CLIP (max_batch_size MAX_BATCH,
# max_queue_delay_ms 5) serves:
#   1. unloaded: only the high-priority stream, priority-1 texts at HIGH_RATE req/s (Poisson), DURATION s;
#   2. qos:  the same stream while a second `mmserve bench` floods the model with priority-3 requests far above
#            its capacity (FLOOD_RATE over FLOOD_CONNECTIONS connections: the model queue holds several batches'
#            worth of low-priority work, so the order the policy picks matters; queue_size 512 keeps it below
#            the 429 limit);
#   3. fifo: run 2 again on a server started with --policy fifo: the baseline that shows what the policy buys.
# Two floods are measured: low-priority images (bulk indexing next to interactive text search) and
# low-priority texts (the same kind as the high-priority stream).
#
#   bench/server_priority.sh [BUILD_DIR (default build/cpu-release; or a folder holding mmserve, as gpu-check's)]
#                            [OUT_DIR (default build/bench-results/server)]
#   DEVICE=cuda serves the same model on the GPU (bf16), the issue 13 item 7 run "on its GPU".
#   env: DURATION (default 30), HIGH_RATE (default 10), FLOOD_RATE (default 6000), FLOOD_CONNECTIONS (default 256),
#   HTTP_THREADS (default 0 = the server default, max(512, 16 x cores) since 65b4147; was 384), ENGINE_THREADS (default 1; both as in server_batching.sh), MAX_BATCH (default 64),
#   POLICIES (default "qos fifo"), FLOODS (default "image text"; both lists by spaces or commas): run a subset;
#   CHUNK_MS: the model's preempt_chunk_ms (default: the server's default);
#   BACKGROUND_NICE: the server config's background_nice (default: the server's default; needs a server that has it).
# Writes OUT_DIR/priority_*.json and OUT_DIR/server_priority.json (keyed by commit), prints the P99 ratios.
# Figures: docs/perf/server_cpu.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build/cpu-release}
if [ -x "$BUILD/mmserve" ]; then MMSERVE=$(realpath "$BUILD/mmserve"); else MMSERVE=$(realpath "$BUILD/src/cli/mmserve"); fi
DEVICE=${DEVICE:-cpu}
OUT=$(realpath -m "${2:-$ROOT/build/bench-results/server}")
DURATION=${DURATION:-30}
HIGH_RATE=${HIGH_RATE:-10}
FLOOD_RATE=${FLOOD_RATE:-6000}
FLOOD_CONNECTIONS=${FLOOD_CONNECTIONS:-256}
HTTP_THREADS=${HTTP_THREADS:-0}
MAX_BATCH=${MAX_BATCH:-64}
ENGINE_THREADS=${ENGINE_THREADS:-1}
mkdir -p "$OUT"
# shellcheck source=bench/server_lib.sh
source "$ROOT/bench/server_lib.sh"
REPO=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-bench-repo.XXXXXX")
trap 'srv_cleanup; rm -rf "$REPO"' EXIT

POLICIES=${POLICIES:-qos fifo}
FLOODS=${FLOODS:-image text}
chunk=""
[ -n "${CHUNK_MS:-}" ] && chunk=$'\npreempt_chunk_ms: '"$CHUNK_MS"
make_model "$REPO" clip small $'max_batch_size: '"$MAX_BATCH"$'\nmax_queue_delay_ms: 5\npriority_levels: 3\n'\
$'default_priority: 2\nqueue_size: 512\nthreads: '"$ENGINE_THREADS"$'\ndevice: '"$DEVICE""$chunk"
server_flags=()
if [ -n "${BACKGROUND_NICE:-}" ]; then
  printf 'background_nice: %s\n' "$BACKGROUND_NICE" >"$OUT/priority_server.yaml"
  server_flags=(--config "$OUT/priority_server.yaml")
fi
cat >"$OUT/priority_high.yaml" <<'EOF'
classes:
  - {name: high-text, kind: text, api: kserve, priority: 1}
EOF
cat >"$OUT/priority_flood_image.yaml" <<'EOF'
classes:
  - {name: low-image, kind: image, api: kserve, priority: 3, image_size: [320, 240], image_format: png}
EOF
cat >"$OUT/priority_flood_text.yaml" <<'EOF'
classes:
  - {name: low-text, kind: text, api: kserve, priority: 3}
EOF

high() {  # high NAME: the high-priority stream
  bench_run "priority_$1" --model clip --profile "$OUT/priority_high.yaml" --rate "$HIGH_RATE" \
    --duration "$DURATION" --connections 16 --seed 11
}

loaded() {  # loaded POLICY FLOOD: the high-priority stream next to a flood that starts 2 s before it
  local flood=$OUT/priority_${1}_$2_flood
  "$MMSERVE" bench --url "$SRV_URL" --model clip --profile "$OUT/priority_flood_$2.yaml" --rate "$FLOOD_RATE" \
    --duration $((DURATION + 4)) --connections "$FLOOD_CONNECTIONS" --seed 12 --json-file "$flood.json" \
    >"$flood.txt" 2>"$flood.err" &
  local flood_pid=$!
  sleep 2
  high "${1}_$2_high"
  wait "$flood_pid" || { cat "$flood.err" >&2; exit 1; }
}

for policy in ${POLICIES//,/ }; do
  srv_start "priority_$policy" "$REPO" --http-threads "$HTTP_THREADS" --policy "$policy" "${server_flags[@]}"
  echo "server $SRV_URL --policy $policy; warming up" >&2
  bench_run "priority_${policy}_warmup" --model clip --rate 200 --duration 2
  if [ "$policy" = qos ]; then
    echo "unloaded high-priority stream, $DURATION s" >&2
    high unloaded
  fi
  for flood in ${FLOODS//,/ }; do
    echo "policy $policy: high-priority stream under a low-priority $flood flood, $DURATION s" >&2
    loaded "$policy" "$flood"
  done
  srv_stop
done

"$PY" "$ROOT/bench/server_summary.py" priority "$OUT" --commit "$(commit_id)" --host "$(host_desc)" \
  --note "max_batch_size $MAX_BATCH, engine threads $ENGINE_THREADS, http threads $HTTP_THREADS, \
device $DEVICE, high $HIGH_RATE req/s, flood $FLOOD_RATE req/s over $FLOOD_CONNECTIONS connections, $DURATION s, \
preempt_chunk_ms ${CHUNK_MS:-default}, background_nice ${BACKGROUND_NICE:-default}"
