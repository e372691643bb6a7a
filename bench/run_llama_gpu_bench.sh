#!/usr/bin/env bash
# The Llama family on the GPU: mmserve (bf16) against HF transformers (bf16, static cache) at the shapes of
# Llama-3-8B and Llama-3.2-1B, same GPU, one run (issue 14's performance section). Each side builds its own random
# weights (timings depend on the shapes). Prints a markdown table with the ratios last.
#
#   bench/run_llama_gpu_bench.sh BIN_DIR RESULT_DIR
# BIN_DIR holds llama_gpu_bench. Environment: ARCHS ("llama-3-8b llama-3.2-1b"), BATCHES (1,32), PROMPT (128),
# NEW_TOKENS (128), PREFILL (2048), ITERS (3), CELL_TIMEOUT_S (300). Writes RESULT_DIR/{hf,mmserve}_<arch>.json.
# W4A16=G (issue 17; e.g. 128): mmserve once more with random 4-bit weights in groups of G (llama_gpu_bench --w4a16 G),
# RESULT_DIR/mmserve_w4a16_<arch>.json, and a second table: W4A16 against mmserve's bf16 run of the same script run.
# FP8=1: the same with random per-tensor E4M3 weights (llama_gpu_bench --fp8), RESULT_DIR/mmserve_fp8_<arch>.json.
# HF=0: no HF transformers run (the quantised tables only).
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR RESULT_DIR" >&2; exit 2; }
BIN=$1
RES=$2
HERE="$(cd "$(dirname "$0")" && pwd)"
ARCHS=${ARCHS:-llama-3-8b llama-3.2-1b}
ARGS=(--batches "${BATCHES:-1,32}" --prompt "${PROMPT:-128}" --new-tokens "${NEW_TOKENS:-128}" --prefill "${PREFILL:-2048}" --iters "${ITERS:-3}")
T=${CELL_TIMEOUT_S:-300}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$RES"
for arch in $ARCHS; do
  echo "[$SECONDS s] $arch: mmserve" >&2
  timeout -k 10 "$T" "$BIN/llama_gpu_bench" --arch "$arch" "${ARGS[@]}" > "$RES/mmserve_$arch.json" 2> "$RES/mmserve_$arch.err" || tail -n 5 "$RES/mmserve_$arch.err" >&2
  if [ -n "${W4A16:-}" ]; then
    echo "[$SECONDS s] $arch: mmserve W4A16 g$W4A16" >&2
    timeout -k 10 "$T" "$BIN/llama_gpu_bench" --arch "$arch" --w4a16 "$W4A16" "${ARGS[@]}" > "$RES/mmserve_w4a16_$arch.json" 2> "$RES/mmserve_w4a16_$arch.err" || tail -n 5 "$RES/mmserve_w4a16_$arch.err" >&2
  fi
  if [ -n "${FP8:-}" ]; then
    echo "[$SECONDS s] $arch: mmserve FP8" >&2
    timeout -k 10 "$T" "$BIN/llama_gpu_bench" --arch "$arch" --fp8 "${ARGS[@]}" > "$RES/mmserve_fp8_$arch.json" 2> "$RES/mmserve_fp8_$arch.err" || tail -n 5 "$RES/mmserve_fp8_$arch.err" >&2
  fi
  [ "${HF:-1}" = 0 ] && continue
  echo "[$SECONDS s] $arch: HF" >&2
  timeout -k 10 "$T" python3 "$HERE/hf_llama_gpu.py" --arch "$arch" "${ARGS[@]}" > "$RES/hf_$arch.json" 2> "$RES/hf_$arch.err" || tail -n 5 "$RES/hf_$arch.err" >&2
done
python3 - "$RES" $ARCHS <<'PY'
import json, sys
res, archs = sys.argv[1], sys.argv[2:]
print("| shapes | measure | mmserve | HF transformers | ratio |")
print("|---|---|---|---|---|")
for a in archs:
    try:
        m = json.load(open(f"{res}/mmserve_{a}.json")); h = json.load(open(f"{res}/hf_{a}.json"))
    except Exception as e:
        print(f"| {a} | missing ({e}) | | | |"); continue
    for dm, dh in zip(m["decode"], h["decode"]):
        print(f"| {a} | decode batch {dm['batch']} tok/s | {dm['tokens_per_s']:.1f} | {dh['tokens_per_s']:.1f} | {dm['tokens_per_s']/dh['tokens_per_s']:.2f}x |")
    pm, ph = m["prefill"]["ms"], h["prefill"]["ms"]
    print(f"| {a} | prefill {m['prefill']['tokens']} ms | {pm:.1f} | {ph:.1f} | {ph/pm:.2f}x faster |")
import os
for env, tag, label in (("W4A16", "w4a16", "W4A16"), ("FP8", "fp8", "FP8")):
    if not os.environ.get(env):
        continue
    print()
    print(f"| shapes | measure | mmserve {label} | mmserve bf16 | ratio |")
    print("|---|---|---|---|---|")
    for a in archs:
        try:
            q = json.load(open(f"{res}/mmserve_{tag}_{a}.json")); m = json.load(open(f"{res}/mmserve_{a}.json"))
        except Exception as e:
            print(f"| {a} | missing ({e}) | | | |"); continue
        print(f"| {a} | weights GB | {q['weight_bytes']/1e9:.2f} ({q['weights']}) | {m['weight_bytes']/1e9:.2f} | {m['weight_bytes']/q['weight_bytes']:.2f}x smaller |")
        for dq, dm in zip(q["decode"], m["decode"]):
            print(f"| {a} | decode batch {dq['batch']} tok/s | {dq['tokens_per_s']:.1f} | {dm['tokens_per_s']:.1f} | {dq['tokens_per_s']/dm['tokens_per_s']:.2f}x |")
        pq, pm = q["prefill"]["ms"], m["prefill"]["ms"]
        print(f"| {a} | prefill {q['prefill']['tokens']} ms | {pq:.1f} | {pm:.1f} | {pm/pq:.2f}x faster |")
PY
