#!/usr/bin/env python3
"""HF transformers' LlavaForConditionalGeneration (bf16) on the GPU at LLaVA-1.5-7B's shapes: the baseline for
bench/llava_gpu_bench (same shapes, same GPU, same run; bench/run_llava_gpu_bench.sh drives both). Random weights
(HF's initialisation under torch.manual_seed(0)): the timings depend on the shapes only.

    python3 bench/hf_llava_gpu.py [--batches 1,8] [--text 40] [--new-tokens 64] [--iters 3]
Prints one JSON object on stdout. Timed (CUDA-synchronised wall clock, median of --iters after one warm-up), with
pixel_values and input_ids already on the GPU:
  prefill_ms   one forward of one image + the text (576 image tokens + --text), i.e. the first token's logits;
  decode       generate() of exactly N new tokens (greedy, min_new_tokens = max_new_tokens) for B requests, each
               with its image: tokens/s = B * N / t, prefill included (as the issue's figures).
"""
import argparse
import json
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama_gpu import timed  # noqa: E402  (CUDA-synchronised median after a warm-up)


def config():
    vision = transformers.CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                           num_attention_heads=16, image_size=336, patch_size=14,
                                           projection_dim=768, hidden_act="quick_gelu")
    text = transformers.LlamaConfig(vocab_size=32064, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                    num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                                    rms_norm_eps=1e-5, pad_token_id=0)
    return transformers.LlavaConfig(vision_config=vision.to_dict(), text_config=text.to_dict(), image_token_index=32000,
                                    vision_feature_layer=-2, vision_feature_select_strategy="default",
                                    image_seq_length=576, projector_hidden_act="gelu")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--text", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = config()
    with torch.device("cuda"):
        model = transformers.LlavaForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    g = torch.Generator().manual_seed(0)
    ids = [1] + torch.randint(2, 32000, (5,), generator=g).tolist() + [32000] * 576
    ids += torch.randint(2, 32000, (1 + 576 + args.text - len(ids),), generator=g).tolist()
    out = {"arch": "llava-1.5-7b", "transformers": transformers.__version__, "torch": torch.__version__,
           "prompt_tokens": len(ids), "new_tokens": args.new_tokens, "decode": []}
    with torch.no_grad():
        pixels1 = torch.randn(1, 3, 336, 336, device="cuda", dtype=torch.bfloat16)
        ids1 = torch.tensor([ids], device="cuda")
        out["prefill_ms"] = 1000 * timed(lambda: model(input_ids=ids1, pixel_values=pixels1), args.iters)
        print(f"prefill: {out['prefill_ms']:.1f} ms", file=sys.stderr)
        for b in [int(x) for x in args.batches.split(",")]:
            pixels = torch.randn(b, 3, 336, 336, device="cuda", dtype=torch.bfloat16)
            batch_ids = torch.tensor([ids] * b, device="cuda")

            def gen():
                model.generate(input_ids=batch_ids, pixel_values=pixels, attention_mask=torch.ones_like(batch_ids),
                               max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                               pad_token_id=0)
            t = timed(gen, args.iters)
            out["decode"].append({"batch": b, "tokens_per_s": b * args.new_tokens / t})
            print(f"batch {b}: {b * args.new_tokens / t:.1f} tok/s", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
