#!/usr/bin/env bash
# CPU throughput of mmserve's CLIP against HF transformers, same weights, same shapes, same threads, one run.
# Runs where torch + transformers are installed (the GPU host has 16 cores); no GPU is used.
#
#   bench/run_clip_cpu_bench.sh BIN_DIR RESULT_DIR [THREADS]
# BIN_DIR holds clip_throughput. Writes RESULT_DIR/clip_cpu.json and prints a table with the ratios.
set -euo pipefail
BIN=$1
RES=$2
THREADS=${3:-16}
CKPT=${CKPT:-/tmp/mmserve-vit-b32}
mkdir -p "$RES"
[ -f "$CKPT/model.safetensors" ] || python3 bench/hf_clip_cpu.py --save "$CKPT"
# Both sides get the same cores: OpenMP/OpenBLAS threads for ours, torch.set_num_threads for HF.
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
runs=()
for round in 1 2; do  # interleaved so that drift hits both sides alike
  "$BIN/clip_throughput" --model "$CKPT" --threads "$THREADS" --batches 1,16 --iters 20 > "$RES/ours_$round.json"
  python3 bench/hf_clip_cpu.py --model "$CKPT" --threads "$THREADS" --batches 1,16 --iters 20 --attn sdpa \
    > "$RES/hf_sdpa_$round.json"
  python3 bench/hf_clip_cpu.py --model "$CKPT" --threads "$THREADS" --batches 1,16 --iters 20 --attn eager \
    > "$RES/hf_eager_$round.json"
done
python3 - "$RES" "$THREADS" <<'PY'
import json, sys, glob, os, subprocess
res, threads = sys.argv[1], sys.argv[2]
def load(prefix):
    best = {}
    for path in sorted(glob.glob(os.path.join(res, prefix + "_*.json"))):
        for r in json.load(open(path))["results"]:
            key = (r["tower"], r["batch"])
            best[key] = max(best.get(key, 0.0), r["per_s"])  # best of the rounds, for both sides
    return best
ours, sdpa, eager = load("ours"), load("hf_sdpa"), load("hf_eager")
rows = []
print(f"| tower | batch | mmserve /s | HF sdpa /s | HF eager /s | vs best HF |")
print(f"|---|---|---|---|---|---|")
for key in sorted(ours):
    best_hf = max(sdpa[key], eager[key])
    rows.append({"tower": key[0], "batch": key[1], "mmserve_per_s": ours[key], "hf_sdpa_per_s": sdpa[key],
                 "hf_eager_per_s": eager[key], "ratio_vs_best_hf": ours[key] / best_hf})
    print(f"| {key[0]} | {key[1]} | {ours[key]:.1f} | {sdpa[key]:.1f} | {eager[key]:.1f} | {ours[key]/best_hf:.2f}x |")
json.dump({"threads": int(threads), "rows": rows}, open(os.path.join(res, "clip_cpu.json"), "w"), indent=1)
PY
