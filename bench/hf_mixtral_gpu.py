#!/usr/bin/env python3
"""HF transformers' MixtralForCausalLM (bf16) on the GPU at Mixtral-8x7B's shapes: the baseline for
bench/mixtral_gpu_bench --mode decode (same shapes, same GPU, same device call). Random weights created in bf16
(torch.set_default_dtype: 93 GB; f32 creation would not fit), HF's initialisation under torch.manual_seed(0).

    python3 bench/hf_mixtral_gpu.py [--batches 1,32] [--prompt 128] [--new-tokens 32] [--iters 2]
Decode tokens/s = B * (N - 1) / (t(N) - t(1)), generate() greedy with exactly N (then 1) new tokens, so the
prompt's prefill is not in the rate (as bench/hf_llama_gpu.py). One JSON object on stdout.
"""
import argparse
import json
import os
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama_gpu import timed  # noqa: E402  (CUDA-synchronised median after a warm-up)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--iters", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                     num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
                                     rope_theta=1e6, rms_norm_eps=1e-5, num_local_experts=8, num_experts_per_tok=2,
                                     sliding_window=None, pad_token_id=0)
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = transformers.MixtralForCausalLM(cfg).eval()
    print(f"ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    out = {"arch": "mixtral-8x7b", "transformers": transformers.__version__, "torch": torch.__version__,
           "decode": []}
    with torch.no_grad():
        for b in [int(x) for x in args.batches.split(",")]:
            ids = torch.randint(2, 32000, (b, args.prompt), device="cuda")

            def gen(n):
                model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, pad_token_id=0)
            t_n = timed(lambda: gen(args.new_tokens), args.iters)
            t_1 = timed(lambda: gen(1), args.iters)
            rate = b * (args.new_tokens - 1) / (t_n - t_1)
            out["decode"].append({"batch": b, "tokens_per_s": rate})
            print(f"batch {b}: {rate:.1f} tok/s", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
