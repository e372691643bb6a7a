#!/usr/bin/env python3
"""Builds mmserve's LoRA fixtures over CLIP (issue 16 item 1: adapters on CLIP's towers, the registry's
`lora-vision-*`) with HF transformers + PEFT, and the goldens of the adapted CLIPModel.

Run where torch, transformers (>= 5), peft and safetensors are installed (the GPU host; CPU, float32, no network):

    python3 tools/reference/make_clip_lora_fixtures.py --fixtures tests/fixtures --out /tmp/fx
    # then: cp -r /tmp/fx/lora/clip-* tests/fixtures/lora/

The base is tests/fixtures/clip-tiny-quickgelu-f32 as committed (CLIPModel: vision hidden 24, 2 layers, patch 8 on
32 px; text hidden 12, 2 layers; projection 10), loaded with CLIPModel.from_pretrained in float32; the inputs are that
fixture's own golden inputs (input_ids and attention_mask of its 8 texts, pixel_values of its 8 images), and the base's
own image and text embeddings are checked against its golden first, so the goldens here sit on the very model mmserve
loads. It writes, under lora/, one folder per adapter (VARIANTS below):
  adapter_config.json, adapter_model.safetensors
                     PeftModel.save_pretrained output as PEFT writes it (tensor names
                     base_model.model.<module>.lora_A.weight [r, in] / lora_B.weight [out, r], F32), except
                     base_model_name_or_path, rewritten to "../../clip-tiny-quickgelu-f32" (the base seen from the
                     adapter's folder); PEFT's README.md (a model card) is removed.
  golden.safetensors F32, from the adapter reloaded from disk (PeftModel.from_pretrained over a fresh base, unmerged):
                       image_embeds [8, 10], text_embeds [8, 10] (L2-normalised, CLIPModel.forward's), logits_per_image
                       [8, 8], and the inputs they came from (input_ids I64, attention_mask I64, pixel_values).
  golden.json        base, the LoRA settings, per adapted module its rank, alpha and PEFT's scaling, the saved tensors,
                     how far the adapter moves each tower's embeddings, merged_max_abs_diff, versions.

A fresh LoRA has lora_B = 0 (REFERENCE_NOTES): built with init_lora_weights=False, then every lora_A / lora_B redrawn
normal and scaled so that ||scaling * B @ A||_F = RHO ||W||_F (make_lora_fixtures.redraw). Checked before anything is
written: the adapted modules and each one's r / alpha / scaling equal EXPECT (worked out here, not taken from PEFT's
matching); the reloaded tensors equal the ones in memory; merge_and_unload() gives the unmerged embeddings within 1e-5;
an adapter on one tower leaves the other tower's embeddings bit for bit unchanged and moves its own by >= MIN_SHIFT.
"""
import argparse
import copy
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_lora_fixtures import (ADAPTER, RHO, check_structure, expected_modules, lora_layers,  # noqa: E402
                                lora_layers_left, redraw, save_adapter, saved_tensors)

BASE = "clip-tiny-quickgelu-f32"
MIN_SHIFT = 0.02  # max |embeds(adapter) - embeds(base)| on the adapted tower(s), embeddings being unit vectors

# name -> (LoraConfig arguments, EXPECT [(regex searched in the module name, r, alpha)], towers adapted, description)
VARIANTS = {
    "clip-vision-r4": (
        dict(target_modules=r".*(vision_model\.encoder\.layers\.\d+\.(self_attn\.(q_proj|v_proj|out_proj)|mlp\.fc1)"
                            r"|visual_projection)$",
             r=4, lora_alpha=8, rank_pattern={"visual_projection": 2}, alpha_pattern={"fc1": 2}),
        [(r"^visual_projection$", 2, 8), (r"^vision_model\.encoder\.layers\.\d+\.mlp\.fc1$", 4, 2),
         (r"^vision_model\.encoder\.layers\.\d+\.self_attn\.(q|v|out)_proj$", 4, 8)],
        {"image"},
        "an image adapter (lora-vision-*): q, v, out_proj and fc1 of every vision layer and visual_projection, r 4, "
        "alpha 8; rank_pattern {visual_projection: 2}, alpha_pattern {fc1: 2}: scales 2, fc1 0.5, projection 4"),
    "clip-both-r8-rslora": (
        dict(target_modules=["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2", "text_projection"], r=8,
             lora_alpha=16, use_rslora=True),
        [(r"^text_projection$", 8, 16),
         (r"^(vision|text)_model\.encoder\.layers\.\d+\.(self_attn\.(q|k|v|out)_proj|mlp\.fc[12])$", 8, 16)],
        {"image", "text"},
        "every linear of both towers' layers and text_projection, r 8, alpha 16, rsLoRA (scale 5.657)"),
}


def load_base(base_dir):
    from transformers import CLIPModel
    return CLIPModel.from_pretrained(base_dir, dtype=torch.float32).eval()


def embed(model, inputs):
    o = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
              pixel_values=inputs["pixel_values"])
    return o.image_embeds.float(), o.text_embeds.float(), o.logits_per_image.float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True, help="tests/fixtures (holds %s)" % BASE)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import peft
    import safetensors
    import transformers
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file, save_file
    torch.set_grad_enabled(False)

    base_dir = os.path.abspath(os.path.join(args.fixtures, BASE))
    base_golden = load_file(os.path.join(base_dir, "golden.safetensors"))
    inputs = {k: base_golden[k] for k in ("input_ids", "attention_mask", "pixel_values")}
    base_image, base_text, _ = embed(load_base(base_dir), inputs)
    for key, mine in (("image_embeds", base_image), ("text_embeds", base_text)):
        diff = float((mine - base_golden[key]).abs().max())
        assert diff < 1e-5, ("the base fixture embeds otherwise", key, diff)
    failures = []
    for name, (config_args, expect, towers, desc) in VARIANTS.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            rslora = config_args.get("use_rslora", False)
            wanted = expected_modules(base_dir, expect, load_base)
            seed = 0
            config = LoraConfig(init_lora_weights=False, lora_dropout=0.0, bias="none", **copy.deepcopy(config_args))
            torch.manual_seed(seed)
            model = get_peft_model(load_base(base_dir), config).eval()
            stds = redraw(model, seed)
            check_structure(model, wanted, rslora, name)
            d = os.path.join(args.out, "lora", name)
            cfg_path = save_adapter(model, d, "../../" + BASE)
            tensors = saved_tensors(os.path.join(d, "adapter_model.safetensors"), wanted)

            reloaded = PeftModel.from_pretrained(load_base(base_dir), d, torch_device="cpu").eval()
            found = check_structure(reloaded, wanted, rslora, "reloaded")
            mem, re_ = lora_layers(model), lora_layers(reloaded)
            for mod in wanted:
                for part in ("lora_A", "lora_B"):
                    assert torch.equal(getattr(mem[mod], part)[ADAPTER].weight, getattr(re_[mod], part)[ADAPTER].weight)
            image, text, logits = embed(reloaded, inputs)
            mem_image, mem_text, _ = embed(model, inputs)
            assert torch.allclose(mem_image, image, atol=1e-6) and torch.allclose(mem_text, text, atol=1e-6)
            merged = PeftModel.from_pretrained(load_base(base_dir), d, torch_device="cpu").merge_and_unload().eval()
            assert not lora_layers_left(merged)
            m_image, m_text, m_logits = embed(merged, inputs)
            merged_diff = max(float((m_image - image).abs().max()), float((m_text - text).abs().max()))
            assert merged_diff < 1e-5, (name, "merged embeddings differ", merged_diff)
            shifts = {"image": float((image - base_image).abs().max()), "text": float((text - base_text).abs().max())}
            for tower, shift in shifts.items():
                if tower in towers:
                    assert shift >= MIN_SHIFT, (name, tower, "barely moves", shift)
                else:
                    assert shift == 0.0, (name, tower, "moved by an adapter on the other tower", shift)
            save_file({"image_embeds": image.contiguous(), "text_embeds": text.contiguous(),
                       "logits_per_image": logits.contiguous(), **{k: v.contiguous() for k, v in inputs.items()}},
                      os.path.join(d, "golden.safetensors"))
            saved_cfg = json.load(open(cfg_path))
            meta = {"description": desc, "base": "../../" + BASE, "towers": sorted(towers),
                    "compute": "float32, CPU; the adapter reloaded with PeftModel.from_pretrained, unmerged",
                    "inputs": "the base fixture's golden input_ids / attention_mask (its 8 texts) and pixel_values "
                              "(its 8 images), copied here",
                    "seed": seed, "max_abs_shift_vs_base": shifts, "merged_max_abs_diff": merged_diff,
                    "lora": {"target_modules": config_args["target_modules"], "r": config_args["r"],
                             "lora_alpha": config_args["lora_alpha"], "use_rslora": rslora,
                             "rank_pattern": config_args.get("rank_pattern", {}),
                             "alpha_pattern": config_args.get("alpha_pattern", {}),
                             "saved_target_modules": saved_cfg.get("target_modules"),
                             "ranks": {k: v[0] for k, v in sorted(found.items())},
                             "alphas": {k: v[1] for k, v in sorted(found.items())},
                             "scaling": {k: v[2] for k, v in sorted(found.items())}},
                    "adapter_tensors": tensors,
                    "init": f"init_lora_weights=False under torch.manual_seed({seed}), then redrawn N(0, 1) and "
                            f"scaled per module so that ||scaling * B @ A||_F = {RHO} ||W||_F",
                    "init_std": dict(sorted(stds.items())),
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "peft": peft.__version__, "safetensors": safetensors.__version__}
            json.dump(meta, open(os.path.join(d, "golden.json"), "w"), indent=1)
            print(f"{name}: {len(wanted)} modules, shifts {shifts}, merged diff {merged_diff:.2e}")
        except Exception as e:
            import traceback
            traceback.print_exc()
            failures.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    if failures:
        sys.exit(f"failed: {failures}")


if __name__ == "__main__":
    main()
