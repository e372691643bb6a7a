#!/usr/bin/env bash
# Whisper on the GPU: mmserve (fp16) against HF transformers (fp16) on the same random weights, same shapes, same
# GPU, one run (issue 5 item 10). For each architecture (tiny, large-v3): bench/hf_whisper_gpu.py builds the
# random model with HF, saves it (save_pretrained, fp16) and times HF's encoder and generate(); then
# whisper_gpu_bench loads that checkpoint and times ours. Prints a markdown table with the ratios last.
#
#   bench/run_whisper_gpu_bench.sh BIN_DIR RESULT_DIR
# BIN_DIR holds whisper_gpu_bench. Environment: ARCHS ("tiny large-v3"), WINDOWS (1,16), BATCHES (1,16),
# NEW_TOKENS (128), ITERS (3), CROSS_KV (same,fp8_e4m3,int8: our decoding with each cross-K/V storage),
# CELL_TIMEOUT_S (300). Writes RESULT_DIR/{hf,mmserve}_<arch>.json and .err.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BIN_DIR RESULT_DIR" >&2
  exit 2
fi
BIN=$1
RES=$2
HERE="$(cd "$(dirname "$0")" && pwd)"
ARCHS=${ARCHS:-tiny large-v3}
WINDOWS=${WINDOWS:-1,16}
BATCHES=${BATCHES:-1,16}
NEW_TOKENS=${NEW_TOKENS:-128}
ITERS=${ITERS:-3}
CROSS_KV=${CROSS_KV:-same,fp8_e4m3,int8}
CELL_TIMEOUT_S=${CELL_TIMEOUT_S:-300}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$RES"
failed=0
for arch in $ARCHS; do
  ckpt=/tmp/mmserve-whisper-$arch
  rm -rf "$ckpt"
  echo "[$SECONDS s] $arch: HF" >&2
  if ! timeout -k 10 "$CELL_TIMEOUT_S" python3 "$HERE/hf_whisper_gpu.py" --arch "$arch" --save "$ckpt" \
      --windows "$WINDOWS" --batches "$BATCHES" --new-tokens "$NEW_TOKENS" --iters "$ITERS" \
      > "$RES/hf_$arch.json" 2> "$RES/hf_$arch.err"; then
    echo "$arch: HF failed (see hf_$arch.err)" >&2
    tail -n 5 "$RES/hf_$arch.err" >&2
    failed=1
  fi
  [ -f "$ckpt/model.safetensors" ] || continue
  echo "[$SECONDS s] $arch: mmserve" >&2
  if ! timeout -k 10 "$CELL_TIMEOUT_S" "$BIN/whisper_gpu_bench" --model "$ckpt" --windows "$WINDOWS" \
      --batches "$BATCHES" --new-tokens "$NEW_TOKENS" --iters "$ITERS" --cross-kv "$CROSS_KV" \
      > "$RES/mmserve_$arch.json" 2> "$RES/mmserve_$arch.err"; then
    echo "$arch: mmserve failed (see mmserve_$arch.err)" >&2
    tail -n 5 "$RES/mmserve_$arch.err" >&2
    failed=1
  fi
  rm -rf "$ckpt"
done

python3 - "$RES" $ARCHS <<'EOF'
import json, os, sys
res, archs = sys.argv[1], sys.argv[2:]
def load(name):
    try:
        with open(os.path.join(res, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception:
        return None
print("| arch | measure | HF transformers fp16 | mmserve fp16 | ratio |")
print("| --- | --- | --- | --- | --- |")
for arch in archs:
    hf, us = load(f"hf_{arch}.json"), load(f"mmserve_{arch}.json")
    if not hf or not us:
        print(f"| {arch} | (missing: {'HF' if not hf else 'mmserve'}) | | | |")
        continue
    for w, ms in sorted(hf.get("encoder_ms", {}).items(), key=lambda kv: int(kv[0])):
        ours = us.get("encoder_ms", {}).get(w)
        if ours:
            print(f"| {arch} | encoder, {w} x 30 s (ms) | {ms:.2f} | {ours:.2f} | {ms / ours:.2f}x |")
    for storage, rows in us.get("decode", {}).items():
        for b, r in sorted(rows.items(), key=lambda kv: int(kv[0])):
            h = hf.get("decode", {}).get(b)
            if h:
                label = f"greedy {us['new_tokens']} tokens, batch {b} (tokens/s)" + (
                    "" if storage == "same" else f", cross K/V {storage}")
                print(f"| {arch} | {label} | {h['tokens_per_s']:.1f} | {r['tokens_per_s']:.1f} | "
                      f"{r['tokens_per_s'] / h['tokens_per_s']:.2f}x |")
    mem = us.get("memory", {})
    for storage, m in mem.items():
        if storage != "same":
            saved = m["cross_kv_uncompressed"] - m["cross_kv"]
            print(f"| {arch} | cross K/V memory, {storage} (MiB, max batch) | {m['cross_kv_uncompressed'] / 2**20:.0f} "
                  f"| {m['cross_kv'] / 2**20:.0f} | saved {saved / 2**20:.0f} MiB |")
EOF
exit $failed
