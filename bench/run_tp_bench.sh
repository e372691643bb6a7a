#!/usr/bin/env bash
# Tensor and pipeline parallel on the GPU host (issue 6 items 2 and 3), one run: ViT-L/14 batch-1 latency (vision,
# and the text tower at 77 tokens; batch 64 too, the plain forward the pipeline's b64 compares with) and Whisper
# large-v3 decoding tokens/s (batches 1 and 16, 64 new tokens), each at TP=1, in an NCCL group of one (the cost of
# the rank threads and the captured no-op all-reduces) and, where 2 GPUs are visible, at TP=2 over NCCL; and the
# pipeline's overlap: ViT-L/14 batch 64 (vision micro-batches of 8, text 4) through 2 stages with the stages
# overlapped against the same stages in turn, on GPU 0 alone (both stages share it: only what one micro-batch leaves
# idle can overlap) and on GPUs 0 and 1 where there are two. One process per configuration, interleaved over ROUNDS
# rounds, the best of the rounds kept per
# configuration. The random-weight checkpoints are written with HF (bench/hf_clip_gpu.py, bench/hf_whisper_gpu.py
# --save, as the other GPU benches do).
#
#   bench/run_tp_bench.sh BIN_DIR RESULT_DIR
# Environment: ROUNDS (3), PARTS ("clip whisper"). Writes RESULT_DIR/tp.jsonl and prints a markdown table with the
# ratios to TP=1.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BIN_DIR RESULT_DIR" >&2
  exit 2
fi
BIN=$1
RES=$2
HERE="$(cd "$(dirname "$0")" && pwd)"
ROUNDS=${ROUNDS:-3}
PARTS=${PARTS:-clip whisper}
L14=/tmp/mmserve-gpu-vit-l14
V3=/tmp/mmserve-whisper-large-v3
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0
mkdir -p "$RES"
has() { [[ " $PARTS " == *" $1 "* ]]; }
if has clip && [ ! -f "$L14/config.json" ]; then
  rm -rf "$L14.partial"
  timeout 300 python3 "$HERE/hf_clip_gpu.py" --save "$L14.partial" --arch vit-l14 > "$RES/save_clip.log" 2>&1 &&
    mv "$L14.partial" "$L14" || echo "could not write the ViT-L/14 checkpoint (see save_clip.log)" >&2
fi
if has whisper && [ ! -f "$V3/model.safetensors" ]; then
  # hf_whisper_gpu.py times HF as it saves: the smallest run that writes the checkpoint.
  timeout 400 python3 "$HERE/hf_whisper_gpu.py" --arch large-v3 --save "$V3" --windows 1 --batches 1 \
    --new-tokens 4 --iters 1 > "$RES/save_whisper.log" 2>&1 || echo "could not write large-v3 (see save_whisper.log)" >&2
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
configs=("tp1:" "nccl1:0")
[ "$gpus" -ge 2 ] && configs+=("tp2:0,1")
: > "$RES/tp.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for c in "${configs[@]}"; do
    name=${c%%:*} devs=${c#*:}
    tp=()
    [ -n "$devs" ] && tp=(--tp-devices "$devs")
    if has clip && [ -f "$L14/config.json" ]; then
      if out=$(timeout 240 "$BIN/clip_throughput" --model "$L14" --device cuda:0 --dtype bf16 --batches 1,64 --iters 50 \
          "${tp[@]}" 2> "$RES/clip_${name}_$round.err"); then
        echo "{\"model\": \"vit-l14\", \"config\": \"$name\", \"round\": $round, \"run\": $out}" >> "$RES/tp.jsonl"
      else
        echo "{\"model\": \"vit-l14\", \"config\": \"$name\", \"round\": $round, \"failed\": true}" >> "$RES/tp.jsonl"
        tail -3 "$RES/clip_${name}_$round.err" >&2
      fi
    fi
    if has clip && [ -f "$L14/config.json" ] && [ "$name" != nccl1 ]; then
      # The pipeline's overlap: both stages on one GPU for tp1's slot, on two GPUs for tp2's.
      stages=$([ "$name" = tp2 ] && echo 0,1 || echo 0,0)
      for mode in overlap serial; do
        flag=()
        [ $mode = serial ] && flag=(--no-overlap)
        if out=$(timeout 240 "$BIN/clip_throughput" --model "$L14" --device cuda:0 --dtype bf16 --batches 64 --iters 20 \
            --pipeline-devices "$stages" --micro-batches 8,4 "${flag[@]}" 2> "$RES/pp_${mode}_${stages}_$round.err"); then
          echo "{\"model\": \"vit-l14\", \"config\": \"pp $stages $mode\", \"round\": $round, \"run\": $out}" >> "$RES/tp.jsonl"
        else
          echo "{\"model\": \"vit-l14\", \"config\": \"pp $stages $mode\", \"round\": $round, \"failed\": true}" >> "$RES/tp.jsonl"
          tail -3 "$RES/pp_${mode}_${stages}_$round.err" >&2
        fi
      done
    fi
    if has whisper && [ -f "$V3/model.safetensors" ]; then
      if out=$(timeout 300 "$BIN/whisper_gpu_bench" --model "$V3" --windows 1 --batches 1,16 --new-tokens 64 \
          --iters 2 --cross-kv same "${tp[@]}" 2> "$RES/whisper_${name}_$round.err"); then
        echo "{\"model\": \"whisper-large-v3\", \"config\": \"$name\", \"round\": $round, \"run\": $out}" >> "$RES/tp.jsonl"
      else
        echo "{\"model\": \"whisper-large-v3\", \"config\": \"$name\", \"round\": $round, \"failed\": true}" >> "$RES/tp.jsonl"
        tail -3 "$RES/whisper_${name}_$round.err" >&2
      fi
    fi
  done
done
python3 - "$RES" "$gpus" <<'PY'
import json, sys
res, gpus = sys.argv[1], int(sys.argv[2])
best, failed = {}, set()  # (model, what, config) -> best figure
for line in open(f"{res}/tp.jsonl"):
    row = json.loads(line)
    if row.get("failed"):
        failed.add((row["model"], row["config"]))
        continue
    run = row["run"]
    if row["model"] == "vit-l14":
        for r in run["results"]:
            key = (row["model"], f"{r['tower']} b{r['batch']} ms", row["config"])
            best[key] = min(best.get(key, 1e30), r["median_ms"])
    else:
        for b, d in run["decode"]["same"].items():
            key = (row["model"], f"decode b{b} tokens/s", row["config"])
            best[key] = max(best.get(key, 0), d["tokens_per_s"])
        for w, ms in run.get("encoder_ms", {}).items():
            key = (row["model"], f"encoder {w} window ms (host mel)", row["config"])
            best[key] = min(best.get(key, 1e30), ms)
print(f"{gpus} GPU(s) visible; best of the rounds; speed-up = config vs TP=1, or the overlapped pipeline vs the same "
      "stages in turn (higher is better)")
print("| model | figure | config | value | speed-up |")
print("|---|---|---|---|---|")
def baseline(model, what, cfg):
    if cfg.startswith("pp "):  # the overlapped pipeline against the same stages in turn
        return best.get((model, what, cfg.replace("overlap", "serial"))) if cfg.endswith("overlap") else None
    return best.get((model, what, "tp1"))
for (model, what, cfg), v in sorted(best.items()):
    base = baseline(model, what, cfg)
    up = (base / v if what.endswith("ms") else v / base) if base else None
    print(f"| {model} | {what} | {cfg} | {v:.3f} | {up:.2f}x |" if up else f"| {model} | {what} | {cfg} | {v:.3f} | - |")
for model, cfg in sorted(failed):
    print(f"| {model} | - | {cfg} | failed | - |")
if gpus < 2:
    print("TP=2 not run: fewer than 2 GPUs visible")
PY
