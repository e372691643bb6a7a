#!/usr/bin/env python3
"""Builds mmserve's SAM conformance fixtures with HF transformers: two tiny random SamModels and their goldens.

Run where torch, transformers (>= 5), Pillow, numpy and safetensors are installed (the GPU host; it runs on the
CPU in float32 and needs no network):

    python3 tools/reference/make_sam_fixtures.py --out /tmp/fixtures   # then: cp -r /tmp/fixtures/sam tests/fixtures/

Inputs (in this repository): the real images in tests/fixtures/images/ (IMAGES below; not copied, the goldens
name them). It writes, under sam/:
  sam-tiny-win-f32/            SamModel, F32 storage: 128x128 input, 8x8 patches (16x16 grid), vision width 32,
                               4 layers, 2 heads, rel-pos on, window 5 (16 is not a multiple: window padding),
                               global attention in layers [1, 3]; prompt encoder / mask decoder width 16
                               (= vision output_channels = 2 * num_pos_feats), 2 decoder layers, 3 multimask
                               outputs, IoU head depth 3
  sam-tiny-glob-f16/           the same shape family with F16 storage: width 24, 3 heads, window 4, global
                               attention in layer [2], output_channels 24; goldens in float32 from the reloaded
                               F16 weights upcast
    each model folder          save_pretrained output (config.json, model.safetensors), the PIL image
                               processor's preprocessor_config.json (SamImageProcessorPil: longest_edge 128,
                               pad_size 128x128, mask_size 64, HF's default ImageNet mean/std, rescale 1/255,
                               BILINEAR), plus
      golden.safetensors       per image <img> (a file name in tests/fixtures/images/):
                                 image/<img>/pixel_values      F32 [1,3,128,128] from SamImageProcessorPil
                                 image/<img>/image_embeddings  F32 [1,C,16,16] SamModel.get_image_embeddings
                               per prompt case <name>:
                                 case/<name>/iou_scores        F32 [1,1,k]
                                 case/<name>/pred_masks        F32 [1,1,k,64,64] (low-res mask logits)
                                 case/<name>/masks_packbits    U8: np.packbits(post_process_masks(...)[0].flatten())
                                                               (bool [1,k,H,W] at the original size, binarised
                                                               at 0; big-endian bit order; shape in golden.json)
                                 case/<name>/input_masks       F32 [1,1,64,64] (only the dense-mask case)
      golden.json              storage/compute dtypes, versions, seed and re-init scales, attention implementation,
                               coords_via (SamProcessor, or HF's formula by hand if it cannot be built), and
                                 images.<img>: file, pil_mode, original_size [H,W], reshaped_input_size [H,W],
                                   pad_values (the distinct values of the padding: [0.0], HF pads after normalising)
                                 cases[]: name, image, multimask_output, has_input_masks, the prompts exactly as
                                   given to the processor (input_points / input_labels / input_boxes in ORIGINAL
                                   pixel coordinates, HF's nesting for one image: points [[[x,y],...]], labels
                                   [[l,...]], boxes [[[x0,y0,x1,y1]]]), what the model was given
                                   (model_inputs.<key>: {dtype, shape, values}: the processor's normalised
                                   coordinates in the 128-resized frame, float64 as HF returns them), iou_scores,
                                   masks_shape [1,k,H,W], mask_fraction (foreground share of each mask) and
                                   coco_rle[]: {size [H,W], counts} of each post-processed mask, COCO compressed
                                   RLE computed by rle_encode + rle_to_string below (pycocotools' maskApi.c),
                                   rle_checked_against_hf_mask_to_rle (its runs equal HF's _mask_to_rle)
  sam/rle_selfcheck.json       the RLE codec's self-checks: known (counts, string) pairs and a real pycocotools
                               string with its decoded run count and area

Pitfalls handled (see ../shared/REFERENCE_NOTES.md): the PIL backend is SamImageProcessorPil; the prompt encoder
width equals 2 * vision num_pos_feats; weights are re-initialised with a larger std (norms 1 + noise) and the
first seed whose goldens are not degenerate (IoU scores differ, every post-processed mask between 2% and 98%
foreground; failing that, the first with no all-0 or all-1 mask) is kept; the goldens come from the saved weights
reloaded (F16 upcast to float32), checked against the in-memory model before anything is written. The RLE codec is
checked against known strings, a real pycocotools string and HF's own _mask_to_rle runs.
"""
import argparse
import importlib
import json
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image

import transformers
from transformers import SamConfig, SamModel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMG_DIR = os.path.join(REPO, "tests", "fixtures", "images")
# rocket: RGB JPEG 640x427 (landscape, downscaled); camera: 8-bit grayscale PNG 512x512; logo: RGBA PNG 500x500;
# camera_la: gray+alpha PNG 90x120 (portrait, upscaled); tiny: RGB JPEG 23x17 (upscaled; 17 * 128/23 = 94.6 -> 95,
# where truncation would give 94).
IMAGES = ["rocket.jpg", "camera.png", "logo.png", "camera_la.png", "tiny.jpg"]
PROC_KW = dict(size={"longest_edge": 128}, pad_size={"height": 128, "width": 128},
               mask_size={"longest_edge": 64}, mask_pad_size={"height": 64, "width": 64})


def dense_mask_prompt():
    """A deterministic low-res mask-logit prompt [1,1,64,64]: a soft ellipse, positive inside."""
    y, x = np.mgrid[0:64, 0:64].astype(np.float32)
    logits = 6.0 * (1.0 - ((x - 22.0) / 15.0) ** 2 - ((y - 30.0) / 11.0) ** 2)
    return torch.from_numpy(logits.astype(np.float32)).reshape(1, 1, 64, 64).contiguous()


# Prompt cases: points/boxes in ORIGINAL pixel coordinates, HF's nesting for one image.
CASES = [
    dict(name="rocket_point", image="rocket.jpg", multimask_output=True,
         input_points=[[[400.0, 180.0]]], input_labels=[[1]]),
    dict(name="rocket_points_neg", image="rocket.jpg", multimask_output=False,
         input_points=[[[400.0, 180.0], [250.5, 300.25], [520.0, 90.0]]], input_labels=[[1, 0, 1]]),
    dict(name="camera_box", image="camera.png", multimask_output=True,
         input_boxes=[[[100.3, 80.0, 380.7, 400.1]]]),
    dict(name="logo_box_points", image="logo.png", multimask_output=True,
         input_boxes=[[[50.0, 60.0, 420.0, 450.0]]], input_points=[[[200.0, 250.0], [300.0, 100.0]]],
         input_labels=[[1, 0]]),
    dict(name="camera_la_point", image="camera_la.png", multimask_output=True,
         input_points=[[[45.5, 60.25]]], input_labels=[[1]]),
    dict(name="tiny_mask_point", image="tiny.jpg", multimask_output=True,
         input_points=[[[11.0, 8.0]]], input_labels=[[1]], input_masks=True),
]

MODELS = {
    # name: (vision kwargs, decoder-side width, mask decoder heads, mask_input_channels, storage dtype, seed)
    "sam-tiny-win-f32": (
        dict(hidden_size=32, output_channels=16, num_hidden_layers=4, num_attention_heads=2, mlp_dim=64,
             window_size=5, global_attn_indexes=[1, 3], num_pos_feats=8),
        16, 2, 16, torch.float32, 2024),
    "sam-tiny-glob-f16": (
        dict(hidden_size=24, output_channels=24, num_hidden_layers=4, num_attention_heads=3, mlp_dim=40,
             window_size=4, global_attn_indexes=[2], num_pos_feats=12),
        24, 3, 8, torch.float16, 3024),
}
REINIT = {"weight_std": 0.12, "bias_std": 0.05, "norm_noise": 0.1, "embedding_std": 0.5, "rel_pos_std": 0.3}


# ------------------------------------------------------------------------------------------ COCO RLE (pycocotools)
# A transliteration of pycocotools' common/maskApi.c (cocodataset/cocoapi): rleEncode, rleToString, rleFrString.
def rle_encode(mask):
    """maskApi.c rleEncode: runs over the column-major (Fortran order) pixels, starting with a run of zeros."""
    flat = np.asarray(mask).astype(np.uint8).flatten(order="F").tolist()
    counts, p, c = [], 0, 0
    for v in flat:
        if v != p:
            counts.append(c)
            c, p = 0, v
        c += 1
    counts.append(c)
    return counts


def rle_to_string(counts):
    """maskApi.c rleToString: like LEB128 with 5 payload bits and a continuation bit per char (ASCII 48..111); from
    the fourth count on (i > 2) the delta against the count two back is written."""
    out = []
    for i, cnt in enumerate(counts):
        x = int(cnt) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            c = x & 0x1F
            x >>= 5  # arithmetic shift, as C's long on the platforms pycocotools runs on
            more = (x != -1) if (c & 0x10) else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def rle_from_string(s):
    """maskApi.c rleFrString."""
    counts, p = [], 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = c & 0x20
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def rle_decode(counts, h, w):
    """maskApi.c rleDecode, back to a row-major [h, w] uint8 array."""
    flat = np.zeros(h * w, dtype=np.uint8)
    pos, v = 0, 0
    for c in counts:
        flat[pos:pos + c] = v
        pos += c
        v = 1 - v
    assert pos == h * w, (pos, h * w)
    return flat.reshape(w, h).T


# Counts/string pairs worked out from maskApi.c (and used by other COCO RLE ports' tests), and a real string
# from pycocotools' own test suite (tests/test_cases.py, testZeroLeadingRLE: size [1350, 1080], 3 leading zeros).
RLE_PAIRS = [([0, 6, 1, 3], "061M"), ([0, 6, 1], "061"), ([0, 6, 1, 1], "061K"), ([0, 6, 1, 5], "061O"),
             ([0, 6, 1, 6], "0610"), ([0, 1, 1, 2, 1, 3, 1, 4, 1], "011101010"), ([0, 1024], "0PP1")]
PYCOCOTOOLS_REAL = (
    "000lg0Zb01O00001O00001O001O00001O00001O001O00001O01O2N3M3M3M2N3M3N2M3M2N1O1O1O1O2N1O1O1O2N1O1O101N1O1O1O2N1O"
    "1O1O2N3M2N1O2N1O2O0O2N1O1O2N1O2N1O2N1O2N1O2N1O2O0O2N1O3M2N1O2N2N2N2N2N1O2N2N2N2N1O2N2N2N2N2N1N3N2N00O1O1O1O100"
    "000000000000O100000000000000001O0000001O00001O0O5L7I5K4L4L3M2N2N2N1O2m]OoXOm`0Sg0j^OVYOTa0lf0c^O]YO[a0ef0\\^Od"
    "YOba0bg0N2N2N2N2N2N2N2N2N2N2N2N2N2N2N2N2N3M2M4M2N3M2N3M2N3M2N3M2N3M2N3M2N3M2N3M2M4M2N2N3M2M4M2N2N3M2M3N3M2N3M"
    "2M3N3M2N2N3L3N2N3M2N3L3N2N3M5J4M3M4L3M3L5L3M3M4L3L4\\EXTOd6jo0K6J5K6I4M1O1O1O1N2O1O1O001N2O00001O0O101O000O2O0"
    "0001N101N101N2N101N101N101N2O0O2O0O2O0O2O1N101N2N2O1N2O1N2O1N101N2O1N2O1N2O0O2O1N2N2O1N2O0O2O1N2O1N2N2N1N4M2N2"
    "M4M2N3L3N2N3L3N3L3N2N3L3N2N3L3M4L3M3M4L3M5K5K5K6J5K5K6J7I7I7Ibijn0")


def rle_selfcheck():
    for counts, s in RLE_PAIRS:
        assert rle_to_string(counts) == s, (counts, rle_to_string(counts), s)
        assert rle_from_string(s) == counts, (s, rle_from_string(s), counts)
    real = rle_from_string(PYCOCOTOOLS_REAL)
    assert sum(real) == 1350 * 1080 and min(real) >= 0, "real pycocotools string does not decode to its size"
    assert rle_to_string(real) == PYCOCOTOOLS_REAL, "real pycocotools string does not round-trip"
    mask = rle_decode(real, 1350, 1080)
    canonical = rle_encode(mask)  # the three leading zero runs merge: [0, 764, ...]
    assert canonical == [0] + real[3:], canonical[:6]
    assert rle_decode(rle_from_string(rle_to_string(canonical)), 1350, 1080).tolist() == mask.tolist()
    rng = np.random.default_rng(7)
    for h, w in [(1, 1), (1, 9), (7, 1), (5, 3), (64, 47)]:
        for density in (0.0, 1.0, 0.5, 0.05):
            m = (rng.random((h, w)) < density).astype(np.uint8)
            counts = rle_encode(m)
            assert sum(counts) == h * w
            assert (rle_decode(rle_from_string(rle_to_string(counts)), h, w) == m).all()
    return {"pairs": [{"counts": c, "string": s} for c, s in RLE_PAIRS],
            "pycocotools_real": {"size": [1350, 1080], "counts": PYCOCOTOOLS_REAL, "runs": len(real),
                                 "area": int(mask.sum()), "first_runs": real[:6],
                                 "canonical_counts_string": rle_to_string(canonical)}}


def check_against_hf_rle(mask_bool):
    """HF's own uncompressed RLE (image_processing_pil_sam._mask_to_rle) must give our rleEncode counts."""
    try:
        mod = importlib.import_module("transformers.models.sam.image_processing_pil_sam")
        fn = getattr(mod, "_mask_to_rle")
    except (ImportError, AttributeError):
        return False
    hf = fn(torch.from_numpy(np.ascontiguousarray(mask_bool))[None])[0]["counts"]
    ours = rle_encode(mask_bool)
    assert [int(c) for c in hf] == ours, "HF _mask_to_rle disagrees with rleEncode"
    return True


# ------------------------------------------------------------------------------------------------ HF helpers
def sam_pil_class():
    cls = None
    try:
        cls = getattr(transformers, "SamImageProcessorPil", None)
    except Exception:  # a lazy module may raise something else than AttributeError
        cls = None
    if cls is None:
        for mod in ("transformers.models.sam.image_processing_pil_sam",
                    "transformers.models.sam.image_processing_sam_pil"):
            try:
                cls = getattr(importlib.import_module(mod), "SamImageProcessorPil")
                break
            except (ImportError, AttributeError):
                pass
    if cls is None:
        names = [n for n in dir(transformers) if n.startswith("SamImage")]
        sys.exit(f"SamImageProcessorPil not found in transformers {transformers.__version__}: {names}")
    return cls


def make_image_processor(cls):
    try:
        return cls(**PROC_KW)
    except (TypeError, ValueError) as e:
        print(f"note: {cls.__name__} rejected mask_size/mask_pad_size ({e!r}); using size/pad_size only")
        return cls(size=PROC_KW["size"], pad_size=PROC_KW["pad_size"])


def make_sam_processor(pil):
    try:
        return transformers.SamProcessor(image_processor=pil), "SamProcessor(image_processor=SamImageProcessorPil)"
    except Exception as e:  # fall back to HF's formula by hand (recorded in golden.json)
        print(f"note: SamProcessor(image_processor=SamImageProcessorPil) failed: {e!r}")
        return None, f"manual (SamProcessor failed: {e!r})"


def manual_normalize(pil, coords, original_size, is_box):
    """processing_sam.SamProcessor._normalize_coordinates, used only when SamProcessor cannot be built."""
    old_h, old_w = original_size
    new_h, new_w = pil._get_preprocess_shape(original_size, longest_edge=PROC_KW["size"]["longest_edge"])
    a = np.array(coords).astype(np.float32 if is_box else np.float64).astype(float)
    if is_box:
        a = a.reshape(-1, 2, 2)
    a[..., 0] = a[..., 0] * (new_w / old_w)
    a[..., 1] = a[..., 1] * (new_h / old_h)
    return a.reshape(-1, 4) if is_box else a


def encode_case(pil, sam_proc, image, case):
    """The processor's output for one case: pixel values, sizes and the normalised prompts (HF's shapes)."""
    prompts = {k: case[k] for k in ("input_points", "input_labels", "input_boxes") if k in case}
    if sam_proc is not None:
        enc = sam_proc(images=image, return_tensors="pt", **prompts)
        return dict(enc)
    enc = dict(pil(images=image, return_tensors="pt"))
    original = enc["original_sizes"][0].tolist()
    if "input_points" in prompts:
        pts = np.array([manual_normalize(pil, p, original, False) for p in prompts["input_points"]])
        enc["input_points"] = torch.from_numpy(pts).unsqueeze(1)
    if "input_labels" in prompts:
        enc["input_labels"] = torch.from_numpy(np.array(prompts["input_labels"])).unsqueeze(1)
    if "input_boxes" in prompts:
        boxes = np.array([manual_normalize(pil, b, original, True) for b in prompts["input_boxes"]])
        enc["input_boxes"] = torch.from_numpy(boxes)
    return enc


def image_embeddings(model, pixel_values):
    out = model.get_image_embeddings(pixel_values)
    if not isinstance(out, torch.Tensor):
        emb = getattr(out, "image_embeddings", None)
        out = emb if isinstance(emb, torch.Tensor) else out[0]
    return out


def load_images():
    images = {}
    for name in IMAGES:
        im = Image.open(os.path.join(IMG_DIR, name))
        im.load()
        images[name] = im
    return images


def preprocess_all(pil, sam_proc, images):
    """Per image: pixel values (asserting SamProcessor and the bare image processor agree) and sizes."""
    per_image = {}
    for name, im in images.items():
        enc = dict(pil(images=im, return_tensors="pt"))
        pv = enc["pixel_values"].to(torch.float32).contiguous()
        assert tuple(pv.shape) == (1, 3, 128, 128), pv.shape
        if sam_proc is not None:
            pv2 = sam_proc(images=im, return_tensors="pt")["pixel_values"]
            assert torch.equal(pv, pv2), f"SamProcessor pixel values differ from the image processor's on {name}"
        orig = [int(v) for v in enc["original_sizes"][0].tolist()]
        resh = [int(v) for v in enc["reshaped_input_sizes"][0].tolist()]
        # HF pads the normalised image, so the padding should be 0.0 (recorded, not assumed).
        pad = torch.cat([pv[..., resh[0]:, :].flatten(), pv[..., :resh[0], resh[1]:].flatten()])
        pad_values = sorted({round(float(v), 6) for v in pad.unique()}) if pad.numel() else []
        per_image[name] = dict(pixel_values=pv, original_size=orig, reshaped_input_size=resh, pil_mode=im.mode,
                               pad_values=pad_values)
    return per_image


# ------------------------------------------------------------------------------------------------ models
def build_config(spec):
    vision_kw, width, dec_heads, mask_ch, _, _ = spec
    assert width == vision_kw["output_channels"] == 2 * vision_kw["num_pos_feats"], "prompt width rule"
    vision = dict(image_size=128, patch_size=8, use_rel_pos=True, **vision_kw)
    prompt = dict(hidden_size=width, image_size=128, patch_size=8, mask_input_channels=mask_ch)
    decoder = dict(hidden_size=width, num_hidden_layers=2, num_attention_heads=dec_heads, mlp_dim=2 * width,
                   attention_downsample_rate=2, num_multimask_outputs=3, iou_head_depth=3,
                   iou_head_hidden_dim=2 * width)
    return SamConfig(vision_config=vision, prompt_encoder_config=prompt, mask_decoder_config=decoder)


def reinit(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + REINIT["norm_noise"] * noise)
            elif "rel_pos" in name:
                p.copy_(REINIT["rel_pos_std"] * noise)
            elif isinstance(_owner(model, name), torch.nn.Embedding) or name.endswith("pos_embed"):
                p.copy_(REINIT["embedding_std"] * noise)
            elif name.endswith("bias"):
                p.copy_(REINIT["bias_std"] * noise)
            else:
                p.copy_(REINIT["weight_std"] * noise)


def _owner(model, param_name):
    module = model
    for part in param_name.split(".")[:-1]:
        module = getattr(module, part)
    return module


def run_model(model, pil, sam_proc, images, per_image):
    """Every golden of one model: per-image embeddings and per-case outputs (float32, no grad)."""
    out = {"images": {}, "cases": []}
    with torch.no_grad():
        for name in IMAGES:
            emb = image_embeddings(model, per_image[name]["pixel_values"])
            out["images"][name] = emb.to(torch.float32).contiguous()
        for case in CASES:
            enc = encode_case(pil, sam_proc, images[case["image"]], case)
            assert torch.equal(enc["pixel_values"].to(torch.float32), per_image[case["image"]]["pixel_values"])
            kwargs = {k: enc[k] for k in ("input_points", "input_labels", "input_boxes") if k in enc}
            masks_in = dense_mask_prompt() if case.get("input_masks") else None
            if masks_in is not None:
                kwargs["input_masks"] = masks_in
            res = model(image_embeddings=out["images"][case["image"]], multimask_output=case["multimask_output"],
                        **kwargs)
            post = pil.post_process_masks(res.pred_masks, enc["original_sizes"], enc["reshaped_input_sizes"])
            out["cases"].append(dict(enc=enc, kwargs=kwargs, iou=res.iou_scores.to(torch.float32).contiguous(),
                                     pred=res.pred_masks.to(torch.float32).contiguous(), post=post[0],
                                     input_masks=masks_in))
        # The embeddings path and the pixel path of the forward agree.
        case = CASES[0]
        enc = encode_case(pil, sam_proc, images[case["image"]], case)
        full = model(pixel_values=per_image[case["image"]]["pixel_values"], input_points=enc["input_points"],
                     input_labels=enc["input_labels"], multimask_output=case["multimask_output"])
        assert torch.allclose(full.pred_masks, out["cases"][0]["pred"], atol=1e-5, rtol=1e-5)
    return out


def degenerate(result, margin):
    """Why a result would make weak goldens (a mask with a foreground share outside (margin, 1 - margin), or
    nearly equal IoU scores), or None."""
    for case, r in zip(CASES, result["cases"]):
        iou = r["iou"].flatten()
        if iou.numel() > 1 and float(iou.max() - iou.min()) < 1e-3:
            return f"{case['name']}: IoU scores nearly equal {iou.tolist()}"
        post = r["post"]
        for j in range(post.shape[1]):
            frac = float(post[0, j].float().mean())
            if not margin < frac < 1.0 - margin:
                return f"{case['name']}: mask {j} foreground fraction {frac:.4f}"
    return None


def compare(a, b, what, exact):
    for name in IMAGES:
        x, y = a["images"][name], b["images"][name]
        ok = torch.equal(x, y) if exact else torch.allclose(x, y, atol=1e-5, rtol=1e-5)
        assert ok, f"{what}: image embeddings of {name} differ by {float((x - y).abs().max())}"
    for case, r, s in zip(CASES, a["cases"], b["cases"]):
        for key in ("iou", "pred"):
            ok = torch.equal(r[key], s[key]) if exact else torch.allclose(r[key], s[key], atol=1e-5, rtol=1e-5)
            assert ok, f"{what}: {key} of {case['name']} differs by {float((r[key] - s[key]).abs().max())}"


def tensor_record(t):
    return {"dtype": str(t.dtype), "shape": list(t.shape), "values": t.tolist()}


def write_model(name, spec, pil, sam_proc, images, per_image, out_dir):
    from safetensors.torch import save_file
    dtype, seed0 = spec[4], spec[5]
    config = build_config(spec)

    def build(seed):
        torch.manual_seed(seed)
        m = SamModel(config).eval()
        reinit(m, seed)
        if dtype != torch.float32:  # judge the goldens that will be written: the weights rounded to storage
            m.to(dtype)
            m.to(torch.float32)
        return m

    chosen, fallback = None, None
    for seed in range(seed0, seed0 + 40):
        model = build(seed)
        result = run_model(model, pil, sam_proc, images, per_image)
        why = degenerate(result, 0.02)
        print(f"model {name}: seed {seed}: {why or 'ok'}")
        if why is None:
            chosen = seed
            break
        if fallback is None and degenerate(result, 0.0) is None:
            fallback = seed
    if chosen is None:
        assert fallback is not None, f"no non-degenerate seed for {name}"
        print(f"model {name}: no seed passes the 2% rule; using {fallback} (no mask all-0 or all-1)")
        chosen = fallback
        model = build(chosen)
        result = run_model(model, pil, sam_proc, images, per_image)

    d = os.path.join(out_dir, name)
    model.to(dtype)
    model.save_pretrained(d)
    pil.save_pretrained(d)
    assert os.path.exists(os.path.join(d, "preprocessor_config.json")), os.listdir(d)
    with open(os.path.join(d, "model.safetensors"), "rb") as f:  # the header says how each tensor is stored
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    stored = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    want = {torch.float32: "F32", torch.float16: "F16"}[dtype]
    assert stored == {want}, f"{name}: stored dtypes {stored}, expected {want}"

    # Goldens from the weights as saved, reloaded in float32; they must equal the in-memory model's.
    ref = SamModel.from_pretrained(d, dtype=torch.float32).eval()
    mem = {k: v.to(torch.float32) for k, v in model.state_dict().items()}
    for k, v in ref.state_dict().items():
        assert k in mem and torch.equal(v, mem[k]), f"{name}: reloaded {k} differs from the saved weights"
    pil2 = type(pil).from_pretrained(d)
    sam_proc2 = make_sam_processor(pil2)[0] if sam_proc is not None else None
    per_image2 = preprocess_all(pil2, sam_proc2, images)
    for n in IMAGES:
        assert torch.equal(per_image2[n]["pixel_values"], per_image[n]["pixel_values"]), f"reloaded processor: {n}"
    golden = run_model(ref, pil2, sam_proc2, images, per_image)
    compare(result, golden, f"{name} reloaded vs in-memory", exact=False)

    tensors, cases_json = {}, []
    for n in IMAGES:
        tensors[f"image/{n}/pixel_values"] = per_image[n]["pixel_values"]
        tensors[f"image/{n}/image_embeddings"] = golden["images"][n]
    for case, r in zip(CASES, golden["cases"]):
        cname = case["name"]
        tensors[f"case/{cname}/iou_scores"] = r["iou"]
        tensors[f"case/{cname}/pred_masks"] = r["pred"]
        post = r["post"].to(torch.bool).numpy()  # [1, k, H, W]
        tensors[f"case/{cname}/masks_packbits"] = torch.from_numpy(np.packbits(post.reshape(-1)))
        if r["input_masks"] is not None:
            tensors[f"case/{cname}/input_masks"] = r["input_masks"]
        rles, hf_checked = [], False
        for j in range(post.shape[1]):
            m = post[0, j]
            counts = rle_encode(m)
            s = rle_to_string(counts)
            assert rle_from_string(s) == counts and (rle_decode(counts, *m.shape) == m).all()
            hf_checked = check_against_hf_rle(m) or hf_checked
            rles.append({"size": list(m.shape), "counts": s})
        entry = {k: case[k] for k in ("name", "image", "multimask_output", "input_points", "input_labels",
                                        "input_boxes") if k in case}
        entry["has_input_masks"] = bool(case.get("input_masks"))
        entry["model_inputs"] = {k: tensor_record(v) for k, v in r["kwargs"].items() if k != "input_masks"}
        entry["iou_scores"] = r["iou"].flatten().tolist()
        entry["masks_shape"] = list(post.shape)
        entry["mask_fraction"] = [float(post[0, j].mean()) for j in range(post.shape[1])]
        entry["coco_rle"] = rles
        entry["rle_checked_against_hf_mask_to_rle"] = hf_checked
        cases_json.append(entry)
        print(f"  case {cname:18s} iou {[round(v, 4) for v in entry['iou_scores']]} "
              f"fg {[round(v, 3) for v in entry['mask_fraction']]}")
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(d, "golden.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    meta = {
        "storage_dtype": str(dtype), "compute_dtype": "float32", "seed": chosen, "reinit": REINIT,
        "attn_implementation": getattr(ref.config, "_attn_implementation", None),
        "transformers": transformers.__version__, "torch": torch.__version__, "pillow": Image.__version__,
        "numpy": np.__version__, "image_processor": type(pil).__name__, "coords_via": COORDS_VIA,
        "post_process": "image_processor.post_process_masks(pred_masks, original_sizes, reshaped_input_sizes) "
                        "(bilinear to pad_size, crop to reshaped, bilinear to original, > 0.0)",
        "images": {n: {"file": f"images/{n}", "pil_mode": per_image[n]["pil_mode"],
                       "original_size": per_image[n]["original_size"],
                       "reshaped_input_size": per_image[n]["reshaped_input_size"],
                       "pad_values": per_image[n]["pad_values"]} for n in IMAGES},
        "cases": cases_json,
    }
    with open(os.path.join(d, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    print(f"model {name}: {sorted(os.listdir(d))}")


COORDS_VIA = None


def torchvision_processor():
    """HF's default (torchvision) SamImageProcessor with the same settings, for information only."""
    try:
        return transformers.SamImageProcessor(**PROC_KW)
    except Exception as e:
        print(f"note: torchvision SamImageProcessor unavailable: {e!r}")
        return None


def main():
    global COORDS_VIA
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (copy its sam/ into tests/fixtures/)")
    args = ap.parse_args()
    torch.set_num_threads(4)
    out_dir = os.path.join(os.path.abspath(args.out), "sam")
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, pillow {Image.__version__}, "
          f"numpy {np.__version__}")
    selfcheck = rle_selfcheck()
    with open(os.path.join(out_dir, "rle_selfcheck.json"), "w", encoding="utf-8") as f:
        json.dump(selfcheck, f, indent=1)

    pil = make_image_processor(sam_pil_class())
    print(f"image processor: {type(pil).__name__}: {json.dumps(pil.to_dict(), default=str)[:1500]}")
    sam_proc, COORDS_VIA = make_sam_processor(pil)
    images = load_images()
    per_image = preprocess_all(pil, sam_proc, images)
    tv = torchvision_processor()
    for n in IMAGES:
        info = ""
        if tv is not None:
            try:
                t = tv(images=images[n], return_tensors="pt")["pixel_values"].to(torch.float32)
                info = f" pil-vs-torchvision max |diff| {float((t - per_image[n]['pixel_values']).abs().max()):.4f}"
            except Exception as e:  # information only
                info = f" (torchvision backend failed: {e!r})"
        print(f"image {n:14s} mode {per_image[n]['pil_mode']:4s} original {per_image[n]['original_size']} "
              f"reshaped {per_image[n]['reshaped_input_size']} pad values {per_image[n]['pad_values']}{info}")
    for name, spec in MODELS.items():
        write_model(name, spec, pil, sam_proc, images, per_image, out_dir)


if __name__ == "__main__":
    main()
