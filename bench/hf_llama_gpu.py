#!/usr/bin/env python3
"""HF transformers' LlamaForCausalLM (bf16) on the GPU: the baseline for bench/llama_gpu_bench (same shapes, same
GPU, same run; bench/run_llama_gpu_bench.sh drives both). Weights are random (HF's initialisation under
torch.manual_seed(0)): the timings depend on the shapes only.

    python3 bench/hf_llama_gpu.py --arch llama-3-8b|llama-3.2-1b [--batches 1,32] [--prompt 128]
                                  [--new-tokens 128] [--prefill 2048] [--iters 3]
Prints one JSON object on stdout (progress on stderr). What is timed (CUDA-synchronised wall clock, median of
--iters after one warm-up):
  decode   generate() with a static cache (cache_implementation="static"), greedy, B rows of --prompt random ids,
           exactly N new tokens (min_new_tokens = max_new_tokens); decode tokens/s = B * (N - 1) / (t(N) - t(1)),
           so the prompt's prefill is not in the rate;
  prefill  one forward of --prefill tokens (batch 1, no cache kept) in ms.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

# The real checkpoints' shapes (meta-llama/Meta-Llama-3-8B, meta-llama/Llama-3.2-1B config.json).
ARCHS = {
    "llama-3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                       rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000,
                       eos_token_id=128001),
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                         rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000,
                         eos_token_id=128001,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=8192)),
}


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=sorted(ARCHS))
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(**ARCHS[args.arch])
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).eval()
    print(f"model ready ({sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters)", file=sys.stderr)
    out = {"arch": args.arch, "transformers": transformers.__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(), "decode": [], "prefill": None}
    with torch.inference_mode():
        for b in [int(x) for x in args.batches.split(",")]:
            ids = torch.randint(0, config.vocab_size, (b, args.prompt), device="cuda")

            def gen(n):
                return lambda: model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                              min_new_tokens=n, do_sample=False, cache_implementation="static",
                                              pad_token_id=0)
            t1 = timed(gen(1), args.iters)
            tn = timed(gen(args.new_tokens), args.iters)
            rate = b * (args.new_tokens - 1) / (tn - t1)
            out["decode"].append({"batch": b, "tokens_per_s": rate, "t_first_s": t1, "t_all_s": tn})
            print(f"batch {b}: {rate:.1f} tok/s", file=sys.stderr)
        ids = torch.randint(0, config.vocab_size, (1, args.prefill), device="cuda")
        ms = 1000 * timed(lambda: model(ids, use_cache=False, logits_to_keep=1), args.iters)
        out["prefill"] = {"tokens": args.prefill, "ms": ms}
        print(f"prefill {args.prefill}: {ms:.1f} ms", file=sys.stderr)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
