#!/usr/bin/env python3
"""HF transformers' CLIPModel on CPU: the baseline for bench/clip_throughput.cpp (same weights, same inputs'
shapes, same thread count, same run). Also writes the random-weight checkpoint both sides load.

    python3 bench/hf_clip_cpu.py --save DIR                      # ViT-B/32 architecture, random weights, f32
    python3 bench/hf_clip_cpu.py --model DIR --threads 16 --batches 1,16 [--attn sdpa|eager]
Prints one JSON object like clip_throughput's.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import CLIPConfig, CLIPModel


def vit_b32_config():
    # openai/clip-vit-base-patch32's architecture (config.json of that checkpoint).
    return CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                         num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu",
                         eos_token_id=2, bos_token_id=0, pad_token_id=1),
        vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                           image_size=224, patch_size=32, hidden_act="quick_gelu"),
        projection_dim=512)


def time_ms(fn, iters):
    fn()
    fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--save")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seq", type=int, default=77)
    ap.add_argument("--attn", default="sdpa")
    args = ap.parse_args()
    if args.save:
        torch.manual_seed(0)
        CLIPModel(vit_b32_config()).eval().save_pretrained(args.save)
        return
    torch.set_num_threads(args.threads)
    model = CLIPModel.from_pretrained(args.model, dtype=torch.float32, attn_implementation=args.attn).eval()
    gen = torch.Generator().manual_seed(7)
    results = []
    with torch.inference_mode():
        for batch in (int(b) for b in args.batches.split(",")):
            pixels = torch.randn(batch, 3, 224, 224, generator=gen)
            ms = time_ms(lambda: model.get_image_features(pixel_values=pixels), args.iters)
            results.append({"tower": "vision", "batch": batch, "median_ms": ms, "per_s": batch * 1000.0 / ms})
            ids = torch.randint(320, 40320, (batch, args.seq), generator=gen)
            ids[:, 0], ids[:, -1] = 49406, 49407
            mask = torch.ones_like(ids)
            ms = time_ms(lambda: model.get_text_features(input_ids=ids, attention_mask=mask), args.iters)
            results.append({"tower": "text", "batch": batch, "median_ms": ms, "per_s": batch * 1000.0 / ms})
    print(json.dumps({"impl": f"hf-transformers-{args.attn}", "threads": args.threads, "results": results,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
