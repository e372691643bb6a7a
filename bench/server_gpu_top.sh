#!/usr/bin/env bash
# Where the server's CPU goes while it serves images on the GPU (a diagnostic for docs/perf/clip_gpu.md's
# server finding; no perf on the GPU host): the same model and load as bench/server_gpu.sh's image saturation
# run, with `top -H` snapshots of the server's busiest threads and `vmstat` of the whole machine.
#
#   bench/server_gpu_top.sh BIN_DIR OUT_DIR      env: CONNECTIONS (512), RATE (20000), DURATION (10)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "$1")
OUT=$(realpath -m "$2")
MMSERVE=$BIN/mmserve
mkdir -p "$OUT"
# shellcheck source=bench/server_lib.sh
source "$ROOT/bench/server_lib.sh"
REPO=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-gpu-repo.XXXXXX")
trap 'srv_cleanup; rm -rf "$REPO"' EXIT
make_model "$REPO" clip-gpu vit-b32 $'device: cuda\ndtype: bf16\nmax_batch_size: 64\nmax_queue_delay_ms: 2\nqueue_size: 4096'
printf 'classes:\n  - {name: image, kind: image, api: kserve, image_size: [224, 224], image_format: png}\n' >"$OUT/img.yaml"
srv_start top "$REPO" --http-threads 0
bench_run top_warmup --model clip-gpu --profile "$OUT/img.yaml" --rate 500 --duration 2 --connections 64
vmstat 2 6 >"$OUT/vmstat.txt" &
VMSTAT=$!
(sleep 3; top -b -H -n 1 -w 200 -p "$SRV_PID" | head -45 >"$OUT/top_server_threads.txt"; top -b -n 1 -w 200 | head -25 >"$OUT/top_all.txt") &
TOP=$!
bench_run top_images --model clip-gpu --profile "$OUT/img.yaml" --rate "${RATE:-20000}" --duration "${DURATION:-10}" \
  --connections "${CONNECTIONS:-512}"
wait "$VMSTAT" "$TOP"  # not a bare wait: the server is a background child too
curl -s "$SRV_URL/metrics" | grep -E '^mmserve_(preprocess|queue|compute|request)_duration_seconds_(sum|count)|^mmserve_batch_size_(sum|count)' >"$OUT/metrics.txt"
srv_stop
tail -3 "$OUT/top_images.txt"; cat "$OUT/vmstat.txt" "$OUT/top_all.txt" "$OUT/top_server_threads.txt" "$OUT/metrics.txt"
