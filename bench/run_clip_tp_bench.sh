#!/usr/bin/env bash
# Tensor-parallel CLIP on the GPU host (issue 6 item 2): ViT-L/14 batch-1 latency (vision, and the text tower at 77
# tokens) at TP=1 against the same model in an NCCL group of one (the cost of the rank threads and the captured
# no-op all-reduces) and, where 2 GPUs are visible, at TP=2 over NCCL; one process per configuration, interleaved
# over ROUNDS rounds, best median of the rounds per configuration. Same random-weight checkpoint for all (written
# with HF by bench/hf_clip_gpu.py --save, as run_clip_gpu_bench.sh does).
#
#   bench/run_clip_tp_bench.sh BIN_DIR RESULT_DIR
# Environment: ITERS (50), ROUNDS (3), BATCHES (1: comma list). Writes RESULT_DIR/clip_tp.json and prints a
# markdown table with the ratios to TP=1.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BIN_DIR RESULT_DIR" >&2
  exit 2
fi
BIN=$1
RES=$2
HF="$(cd "$(dirname "$0")" && pwd)/hf_clip_gpu.py"
ITERS=${ITERS:-50}
ROUNDS=${ROUNDS:-3}
BATCHES=${BATCHES:-1}
L14=/tmp/mmserve-gpu-vit-l14
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0
mkdir -p "$RES"
if [ ! -f "$L14/config.json" ]; then
  rm -rf "$L14.partial"
  timeout 300 python3 "$HF" --save "$L14.partial" --arch vit-l14 > "$RES/tp_save.log" 2>&1 && mv "$L14.partial" "$L14" ||
    { echo "could not write the ViT-L/14 checkpoint (see tp_save.log)" >&2; exit 1; }
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
configs=("tp1:" "nccl1:0")
[ "$gpus" -ge 2 ] && configs+=("tp2:0,1")
: > "$RES/clip_tp.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for c in "${configs[@]}"; do
    name=${c%%:*} devs=${c#*:}
    args=(--model "$L14" --device cuda:0 --dtype bf16 --batches "$BATCHES" --iters "$ITERS")
    [ -n "$devs" ] && args+=(--tp-devices "$devs")
    if out=$(timeout 240 "$BIN/clip_throughput" "${args[@]}" 2> "$RES/tp_${name}_$round.err"); then
      echo "{\"config\": \"$name\", \"round\": $round, \"run\": $out}" >> "$RES/clip_tp.jsonl"
    else
      echo "{\"config\": \"$name\", \"round\": $round, \"failed\": true}" >> "$RES/clip_tp.jsonl"
      tail -3 "$RES/tp_${name}_$round.err" >&2
    fi
  done
done
python3 - "$RES" "$gpus" <<'PY'
import json, sys
res, gpus = sys.argv[1], int(sys.argv[2])
best = {}
for line in open(f"{res}/clip_tp.jsonl"):
    row = json.loads(line)
    if row.get("failed"):
        best.setdefault((row["config"], None, None), None)
        continue
    for r in row["run"]["results"]:
        key = (row["config"], r["tower"], r["batch"])
        best[key] = min(best.get(key) or 1e30, r["median_ms"])
json.dump({f"{k[0]}/{k[1]}/{k[2]}": v for k, v in best.items()}, open(f"{res}/clip_tp.json", "w"), indent=1)
print(f"ViT-L/14 bf16, {gpus} GPU(s) visible; best median over the rounds (ms); ratio = TP=1 / config")
print("| tower | batch | config | ms | TP=1 / config |")
print("|---|---|---|---|---|")
for (cfg, tower, batch), ms in sorted(best.items(), key=lambda kv: (str(kv[0][1]), str(kv[0][2]), kv[0][0])):
    if ms is None:
        print(f"| - | - | {cfg} | failed | - |")
        continue
    base = best.get(("tp1", tower, batch))
    print(f"| {tower} | {batch} | {cfg} | {ms:.3f} | {base / ms:.2f}x |" if base else f"| {tower} | {batch} | {cfg} | {ms:.3f} | - |")
if gpus < 2:
    print("TP=2 not run: fewer than 2 GPUs visible")
PY
