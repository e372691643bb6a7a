#!/usr/bin/env bash
# The decoder engine served (issue 14's serving benchmark), on the GPU host: a random Llama-3.2-1B-shaped
# checkpoint (HF's save_pretrained, bf16) with a real byte-level BPE tokenizer of 51,865 ids (Whisper's, from
# tests/fixtures: it travels with the tree; the prompts are token ids, so only the vocabulary size matters to the
# engine's cost besides the lm_head), `mmserve serve` on cuda:0, and the
# client `mmserve bench --generate` on the same host. Two comparisons, each in the same run:
#   1. continuous vs static batching (mmserve.yaml enable_continuous_batching true / false): closed loop at
#      CONCURRENCY clients, prompts PROMPT (MIN:MAX) random ids, outputs OUTPUT tokens; throughput and P99 TTFT;
#   2. prefix caching on vs off: one client, every prompt a shared PREFIX-token prefix + 32 own tokens, 16 new
#      tokens; TTFT.
#   bench/run_llama_serving_bench.sh BIN_DIR RESULT_DIR
# BIN_DIR holds mmserve. Environment: TOKENIZER_DIR (tests/fixtures/whisper/whisper-tiny-mel80-f32; with VOCAB, its
# size, 51865), CONCURRENCY (64), PROMPT (64:512), OUTPUT (32:256),
# DURATION (20), PREFIX (1024), STATIC_LIGHTER ("16 4": static batching again at these concurrencies), SHAPES (1b | 8b),
# SKIP_BATCHING (1: the prefix-caching runs only). Prints a markdown table last; JSON reports in RESULT_DIR.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR RESULT_DIR" >&2; exit 2; }
BIN=$1; RES=$2
HERE="$(cd "$(dirname "$0")" && pwd)"
TOK=${TOKENIZER_DIR:-$HERE/../tests/fixtures/whisper/whisper-tiny-mel80-f32}
export VOCAB=${VOCAB:-51865}
CONCURRENCY=${CONCURRENCY:-64}; PROMPT=${PROMPT:-64:512}; OUTPUT=${OUTPUT:-32:256}; DURATION=${DURATION:-20}
PREFIX=${PREFIX:-1024}
mkdir -p "$RES"
REPO=$(mktemp -d /tmp/mmserve-llm.XXXX)
M=$REPO/llama1b
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
[ "${SKIP_BATCHING:-0}" = 1 ] && echo "prefix runs only" >&2
python3 - "$M" <<'PY'
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
import os
big = os.environ.get("SHAPES", "1b") == "8b"  # Llama-3-8B's shapes, else Llama-3.2-1B's
c = LlamaConfig(vocab_size=int(os.environ["VOCAB"]), hidden_size=4096 if big else 2048,
                intermediate_size=14336 if big else 8192, num_hidden_layers=32 if big else 16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128 if big else 64, max_position_embeddings=4096,
                rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=not big, bos_token_id=1, eos_token_id=2)
torch.set_default_dtype(torch.bfloat16)
LlamaForCausalLM(c).save_pretrained(sys.argv[1])
PY
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$M/"
port=8311
serve_and_bench() {  # name options-json bench-args...
  local name=$1 options=$2; shift 2
  printf 'device: cuda:0\nmax_batch_size: 256\noptions: %s\n' "$options" > "$M/mmserve.yaml"
  "$BIN/mmserve" serve --model-repository "$REPO" --port $port > "$RES/serve_$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 240); do python3 -c "import urllib.request,sys; urllib.request.urlopen(\"http://127.0.0.1:$port/v2/health/ready\", timeout=1)" 2>/dev/null && break; sleep 0.5; done
  "$BIN/mmserve" bench --url http://127.0.0.1:$port --model llama1b --generate --token-ids 1000:50000 \
      --duration "$DURATION" --output json --json-file "$RES/$name.json" "$@" > "$RES/bench_$name.log" 2>&1
  kill -TERM $pid; wait $pid 2>/dev/null
}
[ "${SKIP_BATCHING:-0}" = 1 ] || serve_and_bench continuous '{max_model_len: 4096}' --concurrency "$CONCURRENCY" --prompt-tokens "$PROMPT" --max-tokens "$OUTPUT"
# Static batching at the same load, and at lighter loads (its P99 TTFT falls towards continuous batching's).
[ "${SKIP_BATCHING:-0}" = 1 ] || for c in $CONCURRENCY ${STATIC_LIGHTER:-16 4}; do
  serve_and_bench static_c$c '{max_model_len: 4096, enable_continuous_batching: false}' --concurrency "$c" --prompt-tokens "$PROMPT" --max-tokens "$OUTPUT"
done
serve_and_bench prefix_on '{max_model_len: 4096}' --concurrency 1 --prefix-tokens "$PREFIX" --prompt-tokens 32:32 --max-tokens 16:16
serve_and_bench prefix_off '{max_model_len: 4096, enable_prefix_caching: false}' --concurrency 1 --prefix-tokens "$PREFIX" --prompt-tokens 32:32 --max-tokens 16:16
python3 - "$RES" <<'PY'
import json, sys
res = sys.argv[1]
def load(n):
    try: return json.load(open(f"{res}/{n}.json"))["overall"]
    except Exception as e: return {"error": str(e)}
import glob, os
names = ["continuous"] + sorted((os.path.basename(p)[:-5] for p in glob.glob(f"{res}/static_c*.json")),
                                key=lambda n: -int(n[8:])) + ["prefix_on", "prefix_off"]
r = {n: load(n) for n in names}
json.dump(r, open(f"{res}/summary.json", "w"))
def f(o, k, q="p99"):
    v = o.get(k)
    return v.get(q) if isinstance(v, dict) else v
print("| run | output tok/s | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms |")
print("|---|---|---|---|---|---|")
for n, o in r.items():
    print(f"| {n} | {f(o,'output_tokens_per_s')} | {f(o,'throughput_ok_per_s')} | {f(o,'ttft_ms','p50')} | {f(o,'ttft_ms','p99')} | {f(o,'itl_ms','p50')} |")
PY
rm -rf "$REPO"
