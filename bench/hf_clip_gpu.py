#!/usr/bin/env python3
"""HF transformers' CLIPModel on the GPU: the baseline for `clip_throughput --device cuda` (same weights, same
input shapes, same GPU, same run; bench/run_clip_gpu_bench.sh drives both). Also writes the random-weight bf16
checkpoints both sides load and measures the card's bf16 GEMM ceiling.

    python3 bench/hf_clip_gpu.py --save DIR --arch vit-b32|vit-l14
    python3 bench/hf_clip_gpu.py --model DIR --tower vision|text --batches 1,8,64,256 --mode eager|sdpa|compile \
        [--iters 30] [--dtype bf16]
    python3 bench/hf_clip_gpu.py --gemm-ceiling
Prints one JSON object on stdout; everything else (warnings, autotune tables) goes to stderr.

What is timed: get_image_features / get_text_features (tower + projection), not L2-normalised; mmserve also
normalises, one tiny kernel that we let it pay. Inputs already sit on the GPU. median_ms comes from CUDA events
around back-to-back calls (no sync between calls, so HF's launch overhead overlaps the GPU where it can);
median_wall_ms syncs around every call, as a synchronous embed call would.
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time
import traceback

import torch
import transformers
from transformers import CLIPConfig, CLIPModel

from hf_clip_cpu import vit_b32_config  # the same ViT-B/32 architecture as the CPU baseline (bench/ is on sys.path)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BOS_ID, EOS_ID = 49406, 49407
COMPILE_MODE = "max-autotune-no-cudagraphs"
WARMUP_CALLS = 3


def vit_l14_config():
    # openai/clip-vit-large-patch14's architecture (config.json of that checkpoint).
    return CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                         num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
                         eos_token_id=2, bos_token_id=0, pad_token_id=1),
        vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                           image_size=224, patch_size=14, hidden_act="quick_gelu"),
        projection_dim=768)


ARCHS = {"vit-b32": vit_b32_config, "vit-l14": vit_l14_config}


def arch_of(config):
    v = config.vision_config
    for name, make in ARCHS.items():
        r = make().vision_config
        if (v.hidden_size, v.num_hidden_layers, v.patch_size) == (r.hidden_size, r.num_hidden_layers, r.patch_size):
            return name
    return f"vit-d{v.hidden_size}-l{v.num_hidden_layers}-p{v.patch_size}"


def save(out_dir, arch):
    torch.manual_seed(0)
    model = CLIPModel(ARCHS[arch]()).eval()  # initialised in float32, then stored as bf16
    model = model.to(torch.bfloat16)
    # safetensors is the default (and in transformers 5 the only format); pass the flag where it still exists.
    kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.save_pretrained(out_dir, **kwargs)


def features(out):
    # get_*_features returns a tensor; newer transformers may return a ModelOutput holding it in pooler_output.
    if isinstance(out, torch.Tensor):
        return out
    pooled = getattr(out, "pooler_output", None)
    return pooled if pooled is not None else out[0]


class Tower(torch.nn.Module):
    """One tower + projection as a module, so that torch.compile sees a plain forward."""

    def __init__(self, model, tower):
        super().__init__()
        self.model = model
        self.tower = tower

    def forward(self, x, mask=None):
        if self.tower == "vision":
            return features(self.model.get_image_features(pixel_values=x))
        return features(self.model.get_text_features(input_ids=x, attention_mask=mask))


def make_inputs(config, tower, batch, dtype, gen):
    if tower == "vision":
        size = config.vision_config.image_size
        return (torch.randn(batch, 3, size, size, generator=gen).to("cuda", dtype),)
    # max_length padding (77 tokens), as the engine does: BOS, random words, EOS last, mask all ones. The config's
    # eos_token_id 2 makes HF pool at argmax(ids), so EOS (the largest id) must be the one at the end.
    seq = config.text_config.max_position_embeddings
    ids = torch.randint(1, 49000, (batch, seq), generator=gen)
    ids[:, 0], ids[:, -1] = BOS_ID, EOS_ID
    return ids.to("cuda"), torch.ones_like(ids).to("cuda")


def sync_wall_s(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def median_event_ms(fn, iters):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def median_wall_ms(fn, iters):
    return statistics.median(sync_wall_s(fn) * 1000.0 for _ in range(iters))


def bench(args):
    # Fixed shapes: let cuDNN pick its best kernel for the patch-embedding conv (the baseline's best foot forward).
    torch.backends.cudnn.benchmark = True
    dtype = DTYPES[args.dtype]
    attn = "sdpa" if args.mode == "compile" else args.mode
    model = CLIPModel.from_pretrained(args.model, dtype=dtype, attn_implementation=attn).to("cuda").eval()
    fn = Tower(model, args.tower)
    if args.mode == "compile":
        # dynamic=False: one specialised graph per batch size, so each batch's first call compiles (compile_s).
        fn = torch.compile(fn, mode=COMPILE_MODE, dynamic=False)
    gen = torch.Generator().manual_seed(7)
    results, failed = [], False
    with torch.inference_mode():
        for batch in (int(b) for b in args.batches.split(",")):
            try:
                inputs = make_inputs(model.config, args.tower, batch, dtype, gen)
                call = lambda: fn(*inputs)  # noqa: E731
                first_s = sync_wall_s(call)
                for _ in range(WARMUP_CALLS):
                    call()
                ms = median_event_ms(call, args.iters)
                row = {"batch": batch, "median_ms": ms, "per_s": batch * 1000.0 / ms,
                       "median_wall_ms": median_wall_ms(call, args.iters)}
                if args.mode == "compile":
                    row["compile_s"] = first_s
                results.append(row)
                del inputs, call
            except Exception as e:  # one bad batch (e.g. out of memory) must not lose the others
                traceback.print_exc()
                results.append({"batch": batch, "error": f"{type(e).__name__}: {e}"[:300]})
                failed = True
            torch.cuda.empty_cache()
    name = args.arch or arch_of(model.config)
    return {"mode": args.mode, "compile_mode": COMPILE_MODE if args.mode == "compile" else None,
            "attn_implementation": attn, "dtype": args.dtype, "tower": args.tower, "arch": name,
            "iters": args.iters, "torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0), "results": results}, failed


def gemm_ceiling(iters):
    n = 8192
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    call = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    for _ in range(10):
        call()
    ms = median_event_ms(call, iters)
    return {"bf16_gemm_tflops": 2.0 * n ** 3 / (ms * 1e-3) / 1e12, "gemm_ms": ms, "mnk": [n, n, n],
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save", metavar="DIR")
    ap.add_argument("--arch", choices=sorted(ARCHS), help="with --save: which architecture; else: label override")
    ap.add_argument("--model", metavar="DIR")
    ap.add_argument("--tower", choices=["vision", "text"], default="vision")
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--mode", choices=["eager", "sdpa", "compile"], default="sdpa")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--gemm-ceiling", action="store_true")
    args = ap.parse_args()
    if not (args.save or args.model or args.gemm_ceiling):
        ap.error("one of --save, --model, --gemm-ceiling is required")
    if args.save and not args.arch:
        ap.error("--save needs --arch")

    # Only the JSON goes to the real stdout: point fd 1 at stderr so that whatever libraries print (inductor's
    # autotune tables, Triton, compile workers that inherit fd 1) cannot corrupt it.
    sys.stdout.flush()
    real_stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    if args.save:
        save(args.save, args.arch)
        return 0
    if not torch.cuda.is_available():
        print("hf_clip_gpu: no CUDA device", file=sys.stderr)
        return 1
    if args.gemm_ceiling:
        out, failed = gemm_ceiling(max(args.iters, 20)), False
    else:
        out, failed = bench(args)
    real_stdout.write(json.dumps(out) + "\n")
    real_stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
