#!/usr/bin/env bash
# LLaVA on the GPU: mmserve (bf16) against HF transformers (bf16) at LLaVA-1.5-7B's shapes (CLIP ViT-L/14-336 +
# Llama-2-7B), same GPU, one run (issue 15's performance section). Each side builds its own random weights (timings
# depend on the shapes). Prints a markdown table with the ratios last.
#
#   bench/run_llava_gpu_bench.sh BIN_DIR RESULT_DIR
# BIN_DIR holds llava_gpu_bench. Environment: BATCHES (1,8), TEXT (40), NEW_TOKENS (64), ITERS (3), CELL_TIMEOUT_S
# (300). Writes RESULT_DIR/{hf,mmserve}_llava.json.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR RESULT_DIR" >&2; exit 2; }
BIN=$1
RES=$2
HERE="$(cd "$(dirname "$0")" && pwd)"
ARGS=(--batches "${BATCHES:-1,8}" --text "${TEXT:-40}" --new-tokens "${NEW_TOKENS:-64}" --iters "${ITERS:-3}")
T=${CELL_TIMEOUT_S:-300}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$RES"
echo "[$SECONDS s] llava: mmserve" >&2
timeout -k 10 "$T" "$BIN/llava_gpu_bench" "${ARGS[@]}" > "$RES/mmserve_llava.json" 2> "$RES/mmserve_llava.err" || tail -n 5 "$RES/mmserve_llava.err" >&2
echo "[$SECONDS s] llava: HF" >&2
timeout -k 10 "$T" python3 "$HERE/hf_llava_gpu.py" "${ARGS[@]}" > "$RES/hf_llava.json" 2> "$RES/hf_llava.err" || tail -n 5 "$RES/hf_llava.err" >&2
python3 - "$RES" <<'PY'
import json, sys
res = sys.argv[1]
print("| LLaVA-1.5-7B shapes | mmserve | HF transformers | ratio | target |")
print("|---|---|---|---|---|")
try:
    m = json.load(open(f"{res}/mmserve_llava.json")); h = json.load(open(f"{res}/hf_llava.json"))
except Exception as e:
    print(f"| missing ({e}) | | | | |"); sys.exit(0)
print(f"| first token, 1 image + text ({m['prompt_tokens']} tokens), ms | {m['prefill_ms']:.1f} (tower {m['tower_ms']:.1f}) | {h['prefill_ms']:.1f} | {h['prefill_ms']/m['prefill_ms']:.2f}x faster | <= 30 |")
targets = {1: ">= 180", 8: ">= 1,000"}
for dm, dh in zip(m["decode"], h["decode"]):
    print(f"| {m['new_tokens']} tokens at batch {dm['batch']}, tok/s (prefill included) | {dm['tokens_per_s']:.1f} | {dh['tokens_per_s']:.1f} | {dm['tokens_per_s']/dh['tokens_per_s']:.2f}x | {targets.get(dm['batch'], '')} |")
PY
