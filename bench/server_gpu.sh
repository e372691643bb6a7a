#!/usr/bin/env bash
# The server on the GPU (issue 4 item 8): a ViT-B/32-shaped CLIP (random weights, real tokenizer) served with
# `device: cuda`, driven by `mmserve bench`: images/s at saturation, then P99 at half of it, against the
# engine's raw throughput on the same GPU in the same run (clip_throughput with host pixels, at the server's
# max batch; also with device pixels, the GPU's own limit). Target: the server keeps >= 80% of the engine's
# images/s (host pixels). Also the dynamic-batching ratio of issue 3 (a) on this host: the same model with
# max_batch_size 1.
#
#   bench/server_gpu.sh BIN_DIR OUT_DIR          (BIN_DIR holds mmserve and clip_throughput)
#   env: DURATION (s, default 15), RATE (saturation offer, default 20000), CONNECTIONS (default 512),
#        MAX_BATCH (default 64), IMAGE (WxH of the PNGs sent, default 224x224),
#        TEXTS=0 skips the two text runs (device time: the image figures only),
#        CLIP_YAML (extra mmserve.yaml lines for the served model, e.g. $'instances: 2\noptions: {image_decode: batch}'),
#        B1=0 skips the max_batch_size 1 run
# Prints a table; writes OUT_DIR/server_gpu.json.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "$1")
OUT=$(realpath -m "$2")
MMSERVE=$BIN/mmserve
DURATION=${DURATION:-15}
RATE=${RATE:-20000}
CONNECTIONS=${CONNECTIONS:-512}
MAX_BATCH=${MAX_BATCH:-64}
IMAGE=${IMAGE:-224x224}
mkdir -p "$OUT"
# shellcheck source=bench/server_lib.sh
source "$ROOT/bench/server_lib.sh"
REPO=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-gpu-repo.XXXXXX")
trap 'srv_cleanup; rm -rf "$REPO"' EXIT

make_model "$REPO" clip-gpu vit-b32 $'device: cuda\ndtype: bf16\nmax_batch_size: '"$MAX_BATCH"$'\nmax_queue_delay_ms: 2\nqueue_size: 4096'"${CLIP_YAML:+$'\n'$CLIP_YAML}"
make_model "$REPO" clip-gpu-b1 vit-b32 $'device: cuda\ndtype: bf16\nmax_batch_size: 1\nbatch_buckets: [1]\nmax_queue_delay_ms: 0\nqueue_size: 4096'
W=${IMAGE%x*}
H=${IMAGE#*x}
cat >"$OUT/gpu_image.yaml" <<EOF2
classes:
  - {name: image, kind: image, api: kserve, image_size: [$W, $H], image_format: png}
EOF2
cat >"$OUT/gpu_text.yaml" <<'EOF2'
classes:
  - {name: text, kind: text, api: kserve}
EOF2

# The engine alone: host pixels in, embeddings out, at the server's max batch (what the server could reach
# if HTTP, decoding and batching cost nothing).
"$BIN/clip_throughput" --model "$REPO/clip-gpu" --device cuda --dtype bf16 --tower vision --input host \
  --batches "$MAX_BATCH" --iters 30 >"$OUT/engine.json" 2>"$OUT/engine.err" || { cat "$OUT/engine.err" >&2; exit 1; }
# ... from 8-bit levels, one buffer per image (what the server's batches carry since the level path): the
# denominator of the second ratio, the engine fed the way the server feeds it ...
"$BIN/clip_throughput" --model "$REPO/clip-gpu" --device cuda --dtype bf16 --tower vision --input levels \
  --batches "$MAX_BATCH" --iters 30 >"$OUT/engine_levels.json" 2>>"$OUT/engine.err" || { cat "$OUT/engine.err" >&2; exit 1; }
# ... and with the pixels already on the GPU (the GPU's own limit; not the ratio's denominator).
"$BIN/clip_throughput" --model "$REPO/clip-gpu" --device cuda --dtype bf16 --tower vision --input device \
  --batches "$MAX_BATCH" --iters 30 >"$OUT/engine_device.json" 2>>"$OUT/engine.err" || { cat "$OUT/engine.err" >&2; exit 1; }
# ... and fed the PNG files themselves through the model's preparer and the GPU decode stage (image_decode: stage,
# one instance, no HTTP): the stage's in-process ceiling, decode and encoder sharing the GPU.
"$BIN/clip_throughput" --model "$REPO/clip-gpu" --device cuda --dtype bf16 --tower vision --input png \
  --image-decode stage --batches "$MAX_BATCH" --iters 60 >"$OUT/engine_png_stage.json" 2>>"$OUT/engine.err" ||
  { cat "$OUT/engine.err" >&2; exit 1; }

srv_start gpu "$REPO" --http-threads 0
echo "server $SRV_URL; warming up" >&2
bench_run gpu_warmup --model clip-gpu --profile "$OUT/gpu_image.yaml" --rate 500 --duration 3 --connections 64
# Where the host's CPU goes at saturation: every core's busy share (/proc/stat) and the server's own CPU seconds.
cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
proc_cpu() { awk '{print $14+$15}' "/proc/$SRV_PID/stat"; }
read -r busy0 total0 < <(cpu_busy)
srv0=$(proc_cpu)
bench_run gpu_image_saturation --model clip-gpu --profile "$OUT/gpu_image.yaml" --rate "$RATE" \
  --duration "$DURATION" --connections "$CONNECTIONS"
read -r busy1 total1 < <(cpu_busy)
srv1=$(proc_cpu)
echo "{\"host_busy\": $(( (busy1 - busy0) * 1000 / (total1 - total0) )), \"server_ticks\": $((srv1 - srv0)), \"host_ticks\": $((busy1 - busy0)), \"all_ticks\": $((total1 - total0)), \"clk_tck\": $(getconf CLK_TCK), \"cores\": $(nproc)}" >"$OUT/cpu.json"
SAT=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["overall"]["throughput_ok_per_s"])' "$OUT/gpu_image_saturation.json")
HALF=$("$PY" -c "print(max(1.0, $SAT / 2))")
bench_run gpu_image_half --model clip-gpu --profile "$OUT/gpu_image.yaml" --rate "$HALF" --duration "$DURATION" \
  --connections "$CONNECTIONS"
if [ "${B1:-1}" != 0 ]; then
  bench_run gpu_image_b1 --model clip-gpu-b1 --profile "$OUT/gpu_image.yaml" --rate "$RATE" --duration "$DURATION" \
    --connections "$CONNECTIONS"
fi
if [ "${TEXTS:-1}" != 0 ]; then
  bench_run gpu_text_saturation --model clip-gpu --profile "$OUT/gpu_text.yaml" --rate "$RATE" \
    --duration "$DURATION" --connections "$CONNECTIONS"
  bench_run gpu_text_b1 --model clip-gpu-b1 --profile "$OUT/gpu_text.yaml" --rate "$RATE" --duration "$DURATION" \
    --connections "$CONNECTIONS"
fi
curl -s "$SRV_URL/metrics" >"$OUT/gpu.metrics"
srv_stop

"$PY" - "$OUT" "$MAX_BATCH" "$IMAGE" <<'PY'
import json, os, sys
out, max_batch, image = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    return json.load(open(os.path.join(out, name + ".json")))
engine = [r for r in load("engine")["results"] if r["tower"] == "vision"][0]
engine_device = [r for r in load("engine_device")["results"] if r["tower"] == "vision"][0]
engine_levels = [r for r in load("engine_levels")["results"] if r["tower"] == "vision"][0]
engine_png = [r for r in load("engine_png_stage")["results"] if r["tower"] == "vision"][0]
cpu = load("cpu")
sat, half = (load(n)["overall"] for n in ("gpu_image_saturation", "gpu_image_half"))
b1 = load("gpu_image_b1")["overall"] if os.path.exists(os.path.join(out, "gpu_image_b1.json")) else None  # B1=0
half_offered = load("gpu_image_half")["offered_rate"]
texts = os.path.exists(os.path.join(out, "gpu_text_saturation.json"))
tsat, tb1 = (load("gpu_text_saturation")["overall"], load("gpu_text_b1")["overall"]) if texts else ({}, {})
def p(stats, key):
    return stats.get("latency_ms", {}).get(key, float("nan"))
keep = sat["throughput_ok_per_s"] / engine["per_s"]
keep_levels = sat["throughput_ok_per_s"] / engine_levels["per_s"]
rows = {
    "engine_images_per_s": engine["per_s"], "engine_device_pixels_images_per_s": engine_device["per_s"],
    "engine_levels_images_per_s": engine_levels["per_s"], "server_keeps_of_levels_engine": keep_levels,
    "engine_png_stage_images_per_s": engine_png["per_s"],
    "saturation_host_busy": cpu["host_busy"] / 1000,
    "saturation_server_cores": cpu["server_ticks"] * cpu["cores"] / cpu["all_ticks"],
    "saturation_cpu": cpu,
    "engine_batch": max_batch,
    "server_images_per_s": sat["throughput_ok_per_s"], "server_keeps": keep,
    "half_rate": half_offered, "half_p50_ms": p(half, "p50"), "half_p99_ms": p(half, "p99"),
    "b1_images_per_s": b1["throughput_ok_per_s"] if b1 else None,
    "batching_ratio_images": sat["throughput_ok_per_s"] / max(b1["throughput_ok_per_s"], 1e-9) if b1 else None,
    "text_per_s": tsat.get("throughput_ok_per_s"), "text_b1_per_s": tb1.get("throughput_ok_per_s"),
    "batching_ratio_texts": tsat["throughput_ok_per_s"] / max(tb1["throughput_ok_per_s"], 1e-9) if texts else None,
    "errors": {k: v.get("errors") for k, v in (("saturation", sat), ("half", half), ("b1", b1 or {}))},
}
json.dump(rows, open(os.path.join(out, "server_gpu.json"), "w"), indent=1)
print(f"| ViT-B/32 bf16 on the GPU, {image} PNG over KServe | value |")
print("|---|---|")
print(f"| engine alone (host pixels, batch {max_batch}) | {engine['per_s']:.0f} images/s |")
print(f"| engine alone (8-bit levels, one host buffer per image, batch {max_batch}) | {engine_levels['per_s']:.0f} images/s |")
print(f"| engine alone (pixels already on the GPU) | {engine_device['per_s']:.0f} images/s |")
print(f"| engine fed the PNGs (preparer + GPU decode stage, one instance, no HTTP) | {engine_png['per_s']:.0f} images/s |")
print(f"| server at saturation | {sat['throughput_ok_per_s']:.0f} images/s = **{100*keep:.0f}%** of the engine with host f32 pixels (target >= 80%), {100*keep_levels:.0f}% of the engine with levels |")
print(f"| server at half of it ({half_offered:.0f}/s offered) | p50 {p(half,'p50'):.1f} ms, p99 {p(half,'p99'):.1f} ms |")
srv_cores = cpu["server_ticks"] * cpu["cores"] / cpu["all_ticks"]  # over the run's wall time (all_ticks / cores)
print(f"| host CPU at saturation | {cpu['host_busy'] / 10:.0f}% of {cpu['cores']} cores busy, the server {srv_cores:.1f} cores |")
if b1:
    print(f"| same server, max_batch_size 1 | {b1['throughput_ok_per_s']:.0f} images/s (batching gains {rows['batching_ratio_images']:.2f}x) |")
if texts:
    print(f"| texts at saturation, batched vs batch 1 | {tsat['throughput_ok_per_s']:.0f} vs {tb1['throughput_ok_per_s']:.0f}/s ({rows['batching_ratio_texts']:.2f}x) |")
PY
