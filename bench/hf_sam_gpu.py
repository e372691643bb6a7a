#!/usr/bin/env python3
"""HF transformers' SamModel: the baseline for bench/sam_gpu_bench (same random weights, same shapes, same machine,
same run; bench/run_sam_gpu_bench.sh drives both).

    python3 bench/hf_sam_gpu.py --arch vit-b|vit-h --save DIR          random weights -> DIR (save_pretrained)
    python3 bench/hf_sam_gpu.py --model DIR [--device cuda|cpu] [--dtype fp16|fp32] [--batches 1] [--iters 20]
    python3 bench/hf_sam_gpu.py --reference FIXTURE_DIR --dtype bf16|fp16 --out FILE
Prints one JSON object on stdout (progress on stderr).
--reference: HF's own forward of a tests/fixtures/sam model in a 16-bit dtype (weights loaded in f32 as the goldens
were, then cast; the goldens' pixel_values and prompts), every output in f32 in FILE (safetensors, the golden's
names): the reference-in-that-precision of the flash-attention rule for tests/conformance/sam_cuda_test.cpp
(env MMSERVE_SAM_LOWP_REF_DIR).

Architectures: SamConfig() is facebook/sam-vit-base's (hidden 768, 12 layers, 12 heads, global layers 2, 5, 8, 11,
window 14); vit-h is SamConfig(vision_config=SamVisionConfig(hidden_size=1280, num_hidden_layers=32,
num_attention_heads=16, global_attn_indexes=[7, 15, 23, 31])), facebook/sam-vit-huge's published sizes (mlp_dim
5120 = 4 x hidden). Weights: HF's own initialisation under torch.manual_seed(0), saved in f32.
What is timed (CUDA events on the GPU, perf_counter on the CPU; median of --iters after 3 warm-ups):
  encoder   model.get_image_embeddings(pixel_values) for B random images already on the device;
  decoder   model(image_embeddings=..., input_points=one click, input_labels=[1], multimask_output=True): the
            prompt encoder + mask decoder of one prompt against a precomputed embedding (HF's interactive use).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import SamConfig, SamModel, SamVisionConfig

ARCHS = {
    "vit-b": {},
    "vit-h": dict(hidden_size=1280, num_hidden_layers=32, num_attention_heads=16, global_attn_indexes=[7, 15, 23, 31]),
}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def timed(fn, iters, device):
    for _ in range(3):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times), min(times)


def save(arch, path):
    torch.manual_seed(0)
    config = SamConfig(vision_config=SamVisionConfig(**ARCHS[arch]).to_dict()) if ARCHS[arch] else SamConfig()
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # HF's init of ViT-H takes ~20 s on the CPU
        model = SamModel(config).eval()
    model.save_pretrained(path)
    log(f"saved {arch} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters) to {path}")
    print(json.dumps({"saved": path, "arch": arch}))


def bench(args):
    device = args.device
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    if device == "cpu":
        torch.set_num_threads(args.threads)
    model = SamModel.from_pretrained(args.model, dtype=dtype).to(device).eval()
    size = model.config.vision_config.image_size
    rows = []
    with torch.inference_mode():
        embedding = None
        for batch in [int(b) for b in args.batches.split(",")]:
            pixels = torch.randn(batch, 3, size, size, device=device, dtype=dtype)
            median, best = timed(lambda: model.get_image_embeddings(pixels), args.iters, device)
            rows.append({"part": "encoder", "batch": batch, "median_ms": median, "min_ms": best,
                         "per_image_ms": median / batch})
            log(f"encoder b{batch}: {median:.2f} ms")
            if batch == 1:
                embedding = model.get_image_embeddings(pixels)
        if embedding is None:
            embedding = model.get_image_embeddings(torch.randn(1, 3, size, size, device=device, dtype=dtype))
        points = torch.tensor([[[[size * 0.5, size * 0.37]]]], device=device, dtype=dtype)
        labels = torch.tensor([[[1]]], device=device)
        median, best = timed(lambda: model(image_embeddings=embedding, input_points=points, input_labels=labels,
                                           multimask_output=True), args.iters, device)
        rows.append({"part": "decoder", "batch": 1, "median_ms": median, "min_ms": best, "per_image_ms": median})
        log(f"decoder: {median:.2f} ms")
    out = {"side": "hf", "model": args.model, "device": device, "dtype": args.dtype, "iters": args.iters,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "attn_implementation": getattr(model.config.vision_config, "_attn_implementation", None),
           "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
           "threads": torch.get_num_threads() if device == "cpu" else None, "results": rows}
    print(json.dumps(out))


def reference(args):
    import os

    from safetensors.torch import load_file, save_file

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    golden = load_file(os.path.join(args.reference, "golden.safetensors"))
    meta = json.load(open(os.path.join(args.reference, "golden.json")))
    model = SamModel.from_pretrained(args.reference, dtype=torch.float32).to("cuda").to(dtype).eval()
    types = {"torch.float64": torch.float64, "torch.float32": torch.float32, "torch.int64": torch.int64}
    out = {}
    with torch.inference_mode():
        for name in meta["images"]:
            pixels = golden[f"image/{name}/pixel_values"].to("cuda", dtype)
            out[f"image/{name}/image_embeddings"] = model.get_image_embeddings(pixels).float().cpu().contiguous()
        for case in meta["cases"]:
            kwargs = {k: torch.tensor(v["values"], dtype=types[v["dtype"]], device="cuda")
                      for k, v in case["model_inputs"].items()}
            if case["has_input_masks"]:
                kwargs["input_masks"] = golden[f"case/{case['name']}/input_masks"].to("cuda", dtype)
            emb = out[f"image/{case['image']}/image_embeddings"].to("cuda", dtype)
            res = model(image_embeddings=emb, multimask_output=case["multimask_output"], **kwargs)
            out[f"case/{case['name']}/pred_masks"] = res.pred_masks.float().cpu().contiguous()
            out[f"case/{case['name']}/iou_scores"] = res.iou_scores.float().cpu().contiguous()
    save_file(out, args.out)
    print(json.dumps({"reference": args.reference, "dtype": args.dtype, "out": args.out, "tensors": len(out)}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", choices=sorted(ARCHS))
    p.add_argument("--save")
    p.add_argument("--model")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--dtype", default="fp16", choices=["fp16", "fp32", "bf16"])
    p.add_argument("--reference")
    p.add_argument("--out")
    p.add_argument("--batches", default="1")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--threads", type=int, default=16)
    args = p.parse_args()
    if args.reference:
        reference(args)
    elif args.save:
        save(args.arch, args.save)
    else:
        bench(args)


if __name__ == "__main__":
    main()
