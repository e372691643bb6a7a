#!/usr/bin/env bash
# Mixtral on the GPU (issue 15): the MoE layer stack (top-2 of 32 experts by the grouped expert GEMM, by one cuBLASLt
# GEMM per expert, and every expert) and Mixtral-8x7B decode with the grouped GEMM and with the per-expert path
# (moe_grouped_rows 0: the path it replaced), one run. Prints a markdown table.
#
#   bench/run_mixtral_gpu_bench.sh BIN_DIR RESULT_DIR
# BIN_DIR holds mixtral_gpu_bench. Environment: SEQS (512,2048), BATCHES (1,32), ITERS (3), CELL_TIMEOUT_S (300).
# Writes RESULT_DIR/{stack,decode,decode_per_expert}.json.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR RESULT_DIR" >&2; exit 2; }
BIN=$1
RES=$2
T=${CELL_TIMEOUT_S:-300}
mkdir -p "$RES"
echo "[$SECONDS s] mixtral: stack" >&2
timeout -k 10 "$T" "$BIN/mixtral_gpu_bench" --mode stack --layers 4 --experts 32 --seqs "${SEQS:-512,2048}" \
  --iters "${ITERS:-3}" > "$RES/stack.json" 2> "$RES/stack.err" || tail -n 5 "$RES/stack.err" >&2
for v in grouped per_expert; do
  rows=48
  [ $v = per_expert ] && rows=0
  echo "[$SECONDS s] mixtral: decode ($v)" >&2
  timeout -k 10 "$T" "$BIN/mixtral_gpu_bench" --mode decode --batches "${BATCHES:-1,32}" --prompt 128 --new-tokens 32 \
    --iters 2 --moe-grouped-rows $rows > "$RES/decode_$v.json" 2> "$RES/decode_$v.err" || tail -n 5 "$RES/decode_$v.err" >&2
done
python3 - "$RES" <<'PY'
import json, sys
res = sys.argv[1]
def load(n):
    try:
        return json.load(open(f"{res}/{n}.json"))
    except Exception as e:
        print(f"| {n}: missing ({e}) | | | |")
        return None
s = load("stack")
if s:
    print("| MoE stack (4 layers, 32 experts) | top-2 grouped, ms | top-2 per expert, ms | every expert, ms | top-2 vs all | grouped vs per expert |")
    print("|---|---|---|---|---|---|")
    for r in s["runs"]:
        print(f"| {r['tokens']} tokens | {r['top2_ms']:.2f} | {r['top2_per_expert_ms']:.2f} | {r['all_ms']:.2f} | {r['speedup']:.2f}x | {r['grouped_vs_per_expert']:.2f}x |")
g, p = load("decode_grouped"), load("decode_per_expert")
if g and p:
    print(f"| Mixtral-8x7B decode | grouped, tok/s | per expert, tok/s | ratio | limit at batch 1 |")
    print("|---|---|---|---|---|")
    for dg, dp in zip(g["decode"], p["decode"]):
        print(f"| batch {dg['batch']} | {dg['tokens_per_s']:.1f} | {dp['tokens_per_s']:.1f} | {dg['tokens_per_s']/dp['tokens_per_s']:.2f}x | {g['limit_tokens_per_s']:.1f} |")
PY
