#!/usr/bin/env bash
# Replicas over two GPUs (issue 6 item 1): the same ViT-B/32-shaped CLIP (random weights, real tokenizer)
# served twice in one server run, as `devices: [cuda:0]` and as `devices: [cuda:0, cuda:1]` (one replica per
# GPU, engine threads pulling from one queue), each driven to saturation by `mmserve bench` with images.
# Reports images/s of both and the scaling; target >= 1.9x. Needs 2 visible GPUs (exits 2 otherwise).
# NOT RUN YET: written and checked on a CPU-only machine (docs/perf/replicas.md).
#
#   bench/server_replicas.sh BIN_DIR OUT_DIR      (BIN_DIR holds mmserve)
#   env: DURATION (s, default 15), RATE (offered per s, default 40000), CONNECTIONS (default 1024),
#        MAX_BATCH (default 64), IMAGE (WxH of the PNGs sent, default 224x224),
#        CPU_DRY_RUN=1 (checks the script itself without GPUs: the small demo CLIP on [cpu] vs [cpu, cpu];
#        its figures say nothing about GPUs)
# Prints a table; writes OUT_DIR/server_replicas.json (keyed by commit).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "$1")
OUT=$(realpath -m "$2")
MMSERVE=$BIN/mmserve
DURATION=${DURATION:-15}
RATE=${RATE:-40000}
CONNECTIONS=${CONNECTIONS:-1024}
MAX_BATCH=${MAX_BATCH:-64}
IMAGE=${IMAGE:-224x224}
export NCCL_NVLS_ENABLE=0  # no NCCL here, but keep multicast off for anything started below
CPU_DRY_RUN=${CPU_DRY_RUN:-0}
mkdir -p "$OUT"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "$CPU_DRY_RUN" != 1 ] && [ "${GPUS:-0}" -lt 2 ]; then
  echo "server_replicas.sh needs 2 visible GPUs, found ${GPUS:-0}" >&2
  exit 2
fi
# shellcheck source=bench/server_lib.sh
source "$ROOT/bench/server_lib.sh"
REPO=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-replicas-repo.XXXXXX")
trap 'srv_cleanup; rm -rf "$REPO"' EXIT

COMMON=$'max_batch_size: '"$MAX_BATCH"$'\nmax_queue_delay_ms: 2\nqueue_size: 8192'
if [ "$CPU_DRY_RUN" = 1 ]; then
  make_model "$REPO" clip-1gpu small $'devices: [cpu]\nthreads: 1\n'"$COMMON"
  make_model "$REPO" clip-2gpu small $'devices: [cpu, cpu]\nthreads: 1\n'"$COMMON"
else
  make_model "$REPO" clip-1gpu vit-b32 $'devices: [cuda:0]\ndtype: bf16\n'"$COMMON"
  make_model "$REPO" clip-2gpu vit-b32 $'devices: [cuda:0, cuda:1]\ndtype: bf16\n'"$COMMON"
fi
W=${IMAGE%x*}
H=${IMAGE#*x}
cat >"$OUT/replicas_image.yaml" <<EOF2
classes:
  - {name: image, kind: image, api: kserve, image_size: [$W, $H], image_format: png}
EOF2

srv_start replicas "$REPO" --http-threads 0
echo "server $SRV_URL; warming up" >&2
curl -s "$SRV_URL/v2/models/clip-2gpu" >"$OUT/clip-2gpu.metadata.json"  # lists both replicas and devices
for m in clip-1gpu clip-2gpu; do
  bench_run "${m}_warmup" --model "$m" --profile "$OUT/replicas_image.yaml" --rate 500 --duration 3 --connections 64
done
# Alternating order would not change much; the 1-GPU model runs first, each with the whole client to itself.
bench_run clip-1gpu --model clip-1gpu --profile "$OUT/replicas_image.yaml" --rate "$RATE" --duration "$DURATION" \
  --connections "$CONNECTIONS"
bench_run clip-2gpu --model clip-2gpu --profile "$OUT/replicas_image.yaml" --rate "$RATE" --duration "$DURATION" \
  --connections "$CONNECTIONS"
curl -s "$SRV_URL/metrics" >"$OUT/replicas.metrics"
srv_stop

"$PY" - "$OUT" "$(commit_id)" "$(host_desc)" "$IMAGE" "$CPU_DRY_RUN" <<'PY'
import json, os, re, sys
out, commit, host, image, dry = sys.argv[1:6]
one, two = (json.load(open(os.path.join(out, n + ".json")))["overall"] for n in ("clip-1gpu", "clip-2gpu"))
# How the 2-GPU model's batches split over its replicas (a skew means one GPU idled).
split = {}
for line in open(os.path.join(out, "replicas.metrics")):
    m = re.match(r'mmserve_replica_items_total\{model="clip-2gpu",replica="(\d+)",device="([^"]+)"\} (\S+)', line)
    if m:
        split[f"{m.group(1)}:{m.group(2)}"] = float(m.group(3))
scaling = two["throughput_ok_per_s"] / max(one["throughput_ok_per_s"], 1e-9)
rows = {"commit": commit, "host": host, "image": image, "cpu_dry_run": dry == "1",
        "one_gpu_images_per_s": one["throughput_ok_per_s"], "two_gpu_images_per_s": two["throughput_ok_per_s"],
        "scaling": scaling, "target": 1.9, "replica_items": split,
        "errors": {"one": one.get("errors"), "two": two.get("errors")}}
json.dump(rows, open(os.path.join(out, "server_replicas.json"), "w"), indent=1)
if dry == "1":
    print("CPU DRY RUN: the small demo CLIP on [cpu] vs [cpu, cpu]; checks the script, not a GPU figure")
print(f"| ViT-B/32 bf16, {image} PNG over KServe, commit {commit} | images/s |")
print("|---|---|")
print(f"| devices: [cuda:0] | {one['throughput_ok_per_s']:.0f} |")
print(f"| devices: [cuda:0, cuda:1] | {two['throughput_ok_per_s']:.0f} = **{scaling:.2f}x** (target >= 1.9x) |")
print(f"| requests per replica (2 GPUs) | {split} |")
PY
