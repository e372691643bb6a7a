#!/usr/bin/env bash
# SAM on the GPU: mmserve (bf16, CUDA graphs) against HF transformers' SamModel (fp16) on the same random weights,
# the same GPU, in one run; and SAM ViT-B on the CPU (mmserve f32 against HF f32, both on THREADS cores).
# Runs on the GPU host (torch + transformers installed). Architectures: facebook/sam-vit-base and -huge's published
# sizes (bench/hf_sam_gpu.py builds them and saves random weights; both sides load that directory).
#
#   bench/run_sam_gpu_bench.sh BIN_DIR RESULT_DIR
# BIN_DIR holds sam_gpu_bench (built with CUDA). Environment: ARCHS ("vit-b vit-h"), BATCHES (1,4), ITERS (20),
# CPU (1: also the CPU table), CPU_ITERS (3), THREADS (16), CELL_TIMEOUT_S (180).
# Writes RESULT_DIR/sam_gpu.json (every row, the targets) and RESULT_DIR/<cell>.json/.err; the markdown table last.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BIN_DIR RESULT_DIR" >&2
  exit 2
fi
BIN=$1
RES=$2
HF="$(cd "$(dirname "$0")" && pwd)/hf_sam_gpu.py"
ARCHS=${ARCHS:-vit-b vit-h}
BATCHES=${BATCHES:-1,4}
ITERS=${ITERS:-20}
CPU=${CPU:-1}
CPU_ITERS=${CPU_ITERS:-3}
THREADS=${THREADS:-16}
CELL_TIMEOUT_S=${CELL_TIMEOUT_S:-180}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$RES"
: > "$RES/cells.tsv"
START=$SECONDS

run_cell() {  # run_cell NAME CMD...: stdout -> NAME.json, stderr -> NAME.err, status -> cells.tsv
  local name=$1
  shift
  local t0=$SECONDS status=ok
  timeout -k 10 "$CELL_TIMEOUT_S" "$@" > "$RES/$name.json" 2> "$RES/$name.err" || status=failed
  printf '%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - t0))" >> "$RES/cells.tsv"
  echo "[$((SECONDS - START))s] $name: $status ($((SECONDS - t0))s)" >&2
}

for arch in $ARCHS; do
  dir=/tmp/mmserve-sam-$arch
  [ -f "$dir/model.safetensors" ] || run_cell "save_$arch" python3 "$HF" --arch "$arch" --save "$dir"
  run_cell "ours_$arch" "$BIN/sam_gpu_bench" --model "$dir" --dtype bf16 --batches "$BATCHES" --iters "$ITERS"
  run_cell "hf_$arch" python3 "$HF" --model "$dir" --dtype fp16 --batches "$BATCHES" --iters "$ITERS"
done
if [ "$CPU" = 1 ]; then
  dir=/tmp/mmserve-sam-vit-b
  [ -f "$dir/model.safetensors" ] || run_cell save_vit-b python3 "$HF" --arch vit-b --save "$dir"
  run_cell ours_cpu_vit-b "$BIN/sam_gpu_bench" --model "$dir" --device cpu --dtype f32 --batches 1 \
    --iters "$CPU_ITERS" --threads "$THREADS"
  run_cell hf_cpu_vit-b python3 "$HF" --model "$dir" --device cpu --dtype fp32 --batches 1 --iters "$CPU_ITERS" \
    --threads "$THREADS"
fi

COMMIT=${COMMIT:-$(git -C "$(dirname "$HF")" rev-parse --short HEAD 2>/dev/null || echo unknown)}
python3 - "$RES" "$COMMIT" "$ARCHS" "$CPU" <<'PY'
import json, os, sys

res, commit, archs, cpu = sys.argv[1:5]
TARGETS = {("vit-h", "encoder", 1): 30.0, ("vit-b", "encoder", 1): 9.0, ("vit-b", "decoder", 1): 1.0,
           ("vit-h", "decoder", 1): 1.0}


def load(name):
    try:
        lines = open(os.path.join(res, name + ".json")).read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


meta, rows = {}, []
sides = [(a, "cuda", f"ours_{a}", f"hf_{a}") for a in archs.split()]
if cpu == "1":
    sides.append(("vit-b", "cpu", "ours_cpu_vit-b", "hf_cpu_vit-b"))
for arch, device, ours_name, hf_name in sides:
    ours, hf = load(ours_name) or {}, load(hf_name) or {}
    for k in ("gpu", "torch", "transformers", "attn_implementation"):
        if hf.get(k) and not meta.get(k):
            meta[k] = hf[k]
    keys = sorted({(r["part"], r["batch"]) for d in (ours, hf) for r in d.get("results", [])})
    for part, batch in keys:
        o = next((r for r in ours.get("results", []) if (r["part"], r["batch"]) == (part, batch)), None)
        h = next((r for r in hf.get("results", []) if (r["part"], r["batch"]) == (part, batch)), None)
        row = {"arch": arch, "device": device, "part": part, "batch": batch,
               "mmserve_ms": o and o["median_ms"], "hf_ms": h and h["median_ms"],
               "mmserve_dtype": ours.get("dtype"), "hf_dtype": hf.get("dtype")}
        row["speedup_vs_hf"] = row["hf_ms"] / row["mmserve_ms"] if row["mmserve_ms"] and row["hf_ms"] else None
        bound = TARGETS.get((arch, part, batch)) if device == "cuda" else None
        if bound is not None:
            row["target_ms"] = bound
            row["target_met"] = None if row["mmserve_ms"] is None else row["mmserve_ms"] <= bound
        rows.append(row)
cells = dict(line.split("\t")[:2] for line in open(os.path.join(res, "cells.tsv")).read().splitlines() if line)
json.dump({"commit": commit, **meta, "rows": rows, "cells": cells}, open(os.path.join(res, "sam_gpu.json"), "w"),
          indent=1)
print(f"## SAM on {meta.get('gpu')}: mmserve {commit} (bf16, CUDA graphs) vs HF transformers "
      f"{meta.get('transformers')} SamModel (fp16; torch {meta.get('torch')}); CPU rows f32 on both sides")
print()
print("| arch | device | part | batch | mmserve ms | HF ms | speedup | target |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    f = lambda v: f"{v:.3f}" if isinstance(v, float) else "-"
    t = ""
    if "target_ms" in r:
        t = f"<= {r['target_ms']:g} ms: " + {None: "unknown", True: "met", False: "not met"}[r["target_met"]]
    sp = f"{r['speedup_vs_hf']:.2f}x" if r["speedup_vs_hf"] else "-"
    print(f"| {r['arch']} | {r['device']} | {r['part']} | {r['batch']} | {f(r['mmserve_ms'])} | {f(r['hf_ms'])} | "
          f"{sp} | {t} |")
PY
