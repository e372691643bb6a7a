#!/usr/bin/env python3
"""torch's fused SDPA (flash / cuDNN / memory-efficient backends, each forced in turn) on the attention
shapes of kernels_cuda_bench, the baseline for our fused attention kernel in the same GPU session.

    python3 bench/attention_torch.py [--json FILE]
Prints a markdown table: shape, backend, microseconds (median of CUDA-event-timed calls).
Layout as ours: q, k, v as [batch, heads, seq, 64] bf16 views of one [batch, seq, 3, heads, 64] tensor.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # name, batch, seq, heads, causal (head_dim 64: every real CLIP)
    ("ViT-B/32 b1", 1, 50, 12, False),
    ("ViT-B/32 b256", 256, 50, 12, False),
    ("ViT-L/14 b64", 64, 257, 16, False),
    ("text b256 causal", 256, 77, 8, True),
]
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]


def time_us(fn, iters=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for name, b, s, h, causal in SHAPES:
        qkv = torch.randn(b, s, 3, h, 64, device="cuda", dtype=torch.bfloat16)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        for backend_name, backend in BACKENDS:
            try:
                with sdpa_kernel([backend]):
                    us = time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            except Exception as e:  # a backend that does not take the shape or layout
                print(f"{name} {backend_name}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
                us = None
            rows.append({"shape": name, "backend": backend_name, "us": us})
    print("| shape | torch SDPA backend | us |\n|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['backend']} | {'-' if r['us'] is None else round(r['us'], 1)} |")
    if args.json:
        json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows},
                  open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
