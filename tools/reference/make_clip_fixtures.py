#!/usr/bin/env python3
"""Builds mmserve's CLIP conformance fixtures with the reference implementations: HF transformers and PIL.

Run where torch, transformers (>= 5) and Pillow are installed (the GPU host; it needs no GPU):

    python3 tools/reference/make_clip_fixtures.py --out /tmp/fixtures   # then copy into tests/fixtures/

Inputs (in this repository): the real CLIP tokenizer in assets/clip_tokenizer/ and the real images in
tests/fixtures/images/. It writes:
  images/*                     extra input images derived from the real ones with PIL/OpenCV (16-bit PNG,
                               gray+alpha PNG, WebP lossy/lossless, grayscale JPEG, a tiny JPEG to upscale)
  clip_tokenizer_hf/           HF's CLIPTokenizer saved with save_pretrained (tokenizer.json etc.)
  clip_tokens.json             HF's ids for a corpus of varied strings (default, truncated, no special tokens)
  clip_preprocess/<cfg>/       preprocessor_config.json of each preprocessing config
  clip_pixels.safetensors      pixel_values of every image under every config, by CLIPImageProcessorPil
                               ("pil/<image>/<cfg>", F32 [3,H,W]) and by the torchvision CLIPImageProcessor
                               ("tv/<image>/<cfg>"); for the 224 config 8-bit levels ("pil_u8/...", U8) to
                               keep the files small
  clip-tiny-*/                 tiny random CLIPModels saved with save_pretrained (F32, BF16, sharded F16;
                               tokenizer.json is a relative symlink to ../clip_tokenizer_hf/tokenizer.json,
                               checked identical first),
                               each with golden.safetensors + golden.json: HF's input_ids, attention_mask,
                               pixel_values, image_embeds, text_embeds, logits_per_image and the towers'
                               last hidden states, computed in float32 from the saved (reloaded) weights.

Pitfalls handled (see ../shared/REFERENCE_NOTES.md): CLIPTokenizer is built from a vocab dict and a merges list
and checked against a known encoding; the PIL processor is CLIPImageProcessorPil; weights are re-initialised
with a larger std so that goldens are sensitive to mistakes.
"""
import argparse
import io
import json
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image

import transformers
from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KNOWN = ("a photo of a cat", [49406, 320, 1125, 539, 320, 2368, 49407])


def image_processor_classes():
    """Returns (PIL processor class, torchvision processor class) of transformers 5."""
    pil_cls = getattr(transformers, "CLIPImageProcessorPil", None)
    if pil_cls is None:
        import importlib
        for mod in ("transformers.models.clip.image_processing_clip_pil",
                    "transformers.models.clip.image_processing_pil_clip"):
            try:
                pil_cls = getattr(importlib.import_module(mod), "CLIPImageProcessorPil")
                break
            except (ImportError, AttributeError):
                pass
    if pil_cls is None:
        names = [n for n in dir(transformers) if n.startswith("CLIPImage")]
        sys.exit(f"CLIPImageProcessorPil not found in transformers {transformers.__version__}: {names}")
    return pil_cls, transformers.CLIPImageProcessor


# ---------------------------------------------------------------------------------------------- tokenizer
def load_tokenizer():
    tok_dir = os.path.join(REPO, "assets", "clip_tokenizer")
    with open(os.path.join(tok_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(tok_dir, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f if line.strip() and not line.startswith("#version")]
    tok = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    ids = tok(KNOWN[0]).input_ids
    assert ids == KNOWN[1], f"tokenizer built wrongly: {ids}"
    return tok


def corpus():
    """At least 200 varied strings: Unicode, CJK, emoji, punctuation, numbers, odd whitespace, long, specials."""
    base = [
        "", " ", "a", "A photo of a cat", "a photo of a dog.", "Hello, world!", "HELLO WORLD", "hello   world",
        "  leading and trailing  ", "tab\tseparated\tvalues", "new\nline", "carriage\r\nreturn", "form\ffeed",
        "vertical\vtab", "non\u00a0breaking\u00a0space", "ideographic\u3000space", "line\u2028separator",
        "zero\u200bwidth\u200bspace", "em\u2003space", "thin\u2009space", "narrow\u202fnbsp", "ogham\u1680space",
        "It's a dog's life", "they're, we've, I'm, you'll, he'd", "IT'S LOUD", "don't stop", "rock 'n' roll",
        "1234567890", "3.14159", "1,000,000 dollars", "Call 555-0199 now", "2024-11-29T15:59:07Z", "v1.2.3-rc4",
        "#hashtag @mention", "user@example.com", "https://example.com/path?q=1&r=2#frag", "C:\\path\\to\\file",
        "e = mc^2", "x_1 + y_2 = z_3", "(parentheses) [brackets] {braces} <angles>", "!!!???...", "--- *** ___",
        "\"quoted\" 'single'", "\u201csmart quotes\u201d \u2018single\u2019", "ellipsis\u2026", "em\u2014dash en\u2013dash",
        "caf\u00e9", "cafe\u0301", "na\u00efve r\u00e9sum\u00e9", "\u00c5ngstr\u00f6m", "Stra\u00dfe", "STRASSE",
        "\u0130stanbul", "\u0131\u0130iI", "\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2", "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01", "\u4f60\u597d\uff0c\u4e16\u754c",
        "\u732b\u306e\u5199\u771f", "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c", "\u30ab\u30bf\u30ab\u30ca",
        "\uff8a\uff9d\uff76\uff78\uff76\uff85", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
        "\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u4e03\u516b\u4e5d\u5341", "\uff11\uff12\uff13 \uff21\uff22\uff23",
        "\u2460\u2461\u2462 \u00bd \u00b2 \u2155", "\u0663\u0664\u0665", "\U0001d400\U0001d401 math bold",
        "\U0001f600", "\U0001f408 cat emoji", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
        "\U0001f44d\U0001f3fd thumbs", "\U0001f1eb\U0001f1f7 flag", "\u2764\ufe0f love", "\u2603 snowman",
        "\u2122 \u00a9 \u00ae", "\u20ac100 \u00a350 \u00a5300 $5", "\u00b0C \u00b5m \u2126", "\u221e \u2211 \u222b \u221a",
        "\u2190\u2191\u2192\u2193", "\u2500\u2502\u250c\u2510", "\ufb01 ligature", "\u1e9e capital sharp s",
        "<|startoftext|>", "<|endoftext|>", "a <|endoftext|> b", "<|startoftext|>hello<|endoftext|>",
        "x<|endoftext|>y", "<|STARTOFTEXT|>", "< |endoftext| >", "<|endoftext", "<|unknown|>", "</w>", "a</w>b",
        "<html><body>tag</body></html>", "&amp; &lt; &gt;", "a photo of a cat</w>", "\\n literal backslash n",
        "\x00null byte", "\x07bell", "\x1b[31mansi\x1b[0m", "\u0301 leading combining", "\ud7ff edge",
        "\ufeffbom", "\ufffd replacement", "\U0010ffff max code point", "\U00020000 cjk ext b",
        "mIxEd CaSe WoRdS", "camelCaseIdentifier", "snake_case_identifier", "kebab-case-identifier",
        "ALLCAPSWORDTHATISLONG", "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
        "antidisestablishmentarianism", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab",
        "a.b.c.d.e.f", "a,b;c:d", "a-b_c=d+e", "word's", "'quoted'", "''", "'s", "'t'", "''s",
    ]
    words = ["photo", "diagram", "painting", "sketch", "rendering", "close-up", "blurry", "bright", "dark",
             "small", "large", "red", "green", "blue", "cat", "dog", "car", "tree", "house", "person"]
    generated = []
    for i in range(80):
        w1, w2, w3 = words[i % 20], words[(i * 7 + 3) % 20], words[(i * 11 + 5) % 20]
        generated.append(f"a {w1} of a {w2} {w3} #{i}")
    long_texts = [
        " ".join(["photo"] * 80),
        " ".join(f"word{i}" for i in range(100)),
        "The quick brown fox jumps over the lazy dog. " * 8,
        "\u732b" * 120,
        "\U0001f600" * 50,
        "a " * 74 + "end",
        "a " * 75 + "end",
        "a " * 76 + "end",
    ]
    items = base + generated + long_texts
    # Drop lone surrogates (not encodable as UTF-8) but keep everything else.
    return [s for s in items if all(not (0xD800 <= ord(c) <= 0xDFFF) for c in s)]


def write_tokens(tok, out):
    tok_dir = os.path.join(out, "clip_tokenizer_hf")
    tok.save_pretrained(tok_dir)
    reloaded = transformers.AutoTokenizer.from_pretrained(tok_dir)
    assert reloaded(KNOWN[0]).input_ids == KNOWN[1], "saved tokenizer does not reload identically"
    cases = []
    for text in corpus():
        default = tok(text).input_ids
        assert reloaded(text).input_ids == default, f"reload differs on {text!r}"
        cases.append({
            "text": text,
            "ids": default,
            "ids_truncated": tok(text, truncation=True).input_ids,
            "ids_no_special": tok(text, add_special_tokens=False).input_ids,
        })
    assert len(cases) >= 200, len(cases)
    with open(os.path.join(out, "clip_tokens.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_dir": "clip_tokenizer_hf", "transformers": transformers.__version__,
                   "cases": cases}, f, ensure_ascii=False, indent=0)
    print(f"tokens: {len(cases)} strings")


# ------------------------------------------------------------------------------------------------ images
def derive_images(img_dir):
    """Makes the input variants PIL can read but the real files don't cover. Deterministic."""
    import cv2
    camera = np.asarray(Image.open(os.path.join(img_dir, "camera.png")))
    chelsea = Image.open(os.path.join(img_dir, "chelsea.png")).convert("RGB")
    rocket = Image.open(os.path.join(img_dir, "rocket.jpg")).convert("RGB")
    # 16-bit grayscale PNG spanning 0..765 (PIL opens it as I;16; convert("RGB") must treat >255 its way).
    g16 = camera[100:196, 150:230].astype(np.uint16) * 3
    Image.fromarray(g16).save(os.path.join(img_dir, "camera16.png"))
    # 16-bit RGB PNG (OpenCV writes BGR order, so flip) with distinct low bytes.
    c = np.asarray(chelsea)[50:140, 100:220].astype(np.uint16)
    rgb16 = c * 257 + (np.arange(c.size, dtype=np.uint16).reshape(c.shape) % 200)
    cv2.imwrite(os.path.join(img_dir, "chelsea16.png"), rgb16[:, :, ::-1].copy())
    # Gray + alpha.
    la = Image.merge("LA", (Image.fromarray(camera[0:120, 0:90]), Image.fromarray(camera[200:320, 300:390])))
    la.save(os.path.join(img_dir, "camera_la.png"))
    crop = chelsea.crop((120, 40, 300, 160))
    crop.save(os.path.join(img_dir, "chelsea_lossy.webp"), quality=80, method=4)
    crop.save(os.path.join(img_dir, "chelsea_lossless.webp"), lossless=True)
    rocket.convert("L").resize((200, 133), Image.BICUBIC).save(os.path.join(img_dir, "rocket_gray.jpg"), quality=90)
    rocket.crop((300, 100, 323, 117)).save(os.path.join(img_dir, "tiny.jpg"), quality=95)


PREPROCESS = {
    # name: (shortest_edge, crop (h, w), mean, std); clip224 is openai/clip-vit-base-patch32's.
    "clip224": (224, (224, 224), [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]),
    "small32": (32, (32, 32), [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]),
    "odd27": (30, (27, 27), [0.5, 0.45, 0.4], [0.25, 0.3, 0.35]),
    "pad40": (33, (40, 36), [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),  # crop larger than the resized image
}


def make_processors(pil_cls, tv_cls, out):
    procs = {}
    for name, (edge, (ch, cw), mean, std) in PREPROCESS.items():
        kwargs = dict(size={"shortest_edge": edge}, crop_size={"height": ch, "width": cw}, image_mean=mean,
                      image_std=std, do_resize=True, do_center_crop=True, do_rescale=True, do_normalize=True,
                      do_convert_rgb=True, resample=3)
        pil, tv = pil_cls(**kwargs), tv_cls(**kwargs)
        d = os.path.join(out, "clip_preprocess", name)
        pil.save_pretrained(d)
        procs[name] = (pil, tv)
    return procs


def pixel_values(proc, image):
    return proc(images=image, return_tensors="pt")["pixel_values"][0].to(torch.float32).contiguous()


def write_pixels(procs, img_dir, out):
    from safetensors.torch import save_file
    tensors = {}
    names = sorted(n for n in os.listdir(img_dir) if n.split(".")[-1] in ("png", "jpg", "webp")
                   and n != "truncated.jpg")
    for name in names:
        image = Image.open(os.path.join(img_dir, name))
        image.load()
        for cfg, (pil, tv) in procs.items():
            if cfg == "clip224" and name not in ("rocket.jpg", "camera.png"):
                continue
            p, t = pixel_values(pil, image), pixel_values(tv, image)
            if cfg == "clip224":
                mean = torch.tensor(PREPROCESS[cfg][2]).view(3, 1, 1)
                std = torch.tensor(PREPROCESS[cfg][3]).view(3, 1, 1)
                for key, v in (("pil_u8", p), ("tv_u8", t)):
                    levels = ((v * std + mean) * 255.0).round()
                    assert ((v * std + mean) * 255.0 - levels).abs().max() < 1e-3, "not 8-bit levels"
                    tensors[f"{key}/{name}/{cfg}"] = levels.to(torch.uint8).contiguous()
            else:
                tensors[f"pil/{name}/{cfg}"] = p
                tensors[f"tv/{name}/{cfg}"] = t
            diff = (p - t).abs().max().item()
            print(f"pixels {name:24s} {cfg:8s} {tuple(p.shape)} pil-vs-torchvision max |diff| {diff:.4f}")
    save_file(tensors, os.path.join(out, "clip_pixels.safetensors"),
              metadata={"transformers": transformers.__version__, "pillow": Image.__version__})


# ------------------------------------------------------------------------------------------------ models
MODELS = {
    # name: (text kwargs, vision kwargs, projection_dim, storage dtype, preprocess cfg, shard size)
    "clip-tiny-quickgelu-f32": (
        dict(hidden_size=12, intermediate_size=37, num_hidden_layers=2, num_attention_heads=3,
             hidden_act="quick_gelu", eos_token_id=2),  # legacy argmax pooling
        dict(hidden_size=24, intermediate_size=53, num_hidden_layers=2, num_attention_heads=2, image_size=32,
             patch_size=8, hidden_act="quick_gelu"),
        10, torch.float32, "small32", None),
    "clip-tiny-gelu-bf16": (
        dict(hidden_size=16, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4, hidden_act="gelu",
             eos_token_id=49407, bos_token_id=49406, pad_token_id=49407),  # first-EOS pooling
        dict(hidden_size=32, intermediate_size=72, num_hidden_layers=2, num_attention_heads=4, image_size=27,
             patch_size=9, hidden_act="gelu"),
        12, torch.bfloat16, "odd27", None),
    "clip-tiny-gelu-f16-sharded": (
        dict(hidden_size=8, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, hidden_act="gelu",
             eos_token_id=49407, bos_token_id=49406, pad_token_id=49407),
        dict(hidden_size=16, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2, image_size=32,
             patch_size=16, hidden_act="gelu"),
        8, torch.float16, "small32", "300KB"),
}

GOLDEN_TEXTS = ["a photo of a cat", "", "A DIAGRAM, of 2 dogs!!", "\u732b\u306e\u5199\u771f \U0001f408",
                "a <|endoftext|> b", "x " * 90 + "end", "caf\u00e9  \t ol\u00e9", "<|startoftext|>hi"]
GOLDEN_IMAGES = ["rocket.jpg", "chelsea.png", "camera.png", "logo.png", "palette_color.png", "tiny.jpg",
                 "chelsea_lossless.webp", "camera16.png"]


def reinit(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "logit_scale":
                p.fill_(2.0)
            elif "layer_norm" in name or "layrnorm" in name or "layernorm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def link_shared_tokenizer(model_dir, out):
    """Replaces model_dir/tokenizer.json with a relative symlink to ../clip_tokenizer_hf/tokenizer.json.

    Every tiny model saves the same 3.6 MB tokenizer.json; one copy in git instead of four keeps the fixtures
    (and what travels to the GPU host) ~11 MB smaller. Relative, so the link survives `cp -r` of the whole
    output into tests/fixtures/ (cp -r keeps links as links) and git stores it as a link. Checked byte for byte
    first: if a transformers version ever saves them differently, this fails instead of hiding the difference.
    """
    own = os.path.join(model_dir, "tokenizer.json")
    shared = os.path.join(out, "clip_tokenizer_hf", "tokenizer.json")
    with open(own, "rb") as a, open(shared, "rb") as b:
        assert a.read() == b.read(), f"{own} differs from {shared}: keep it as a file and say why"
    os.remove(own)
    os.symlink(os.path.join("..", "clip_tokenizer_hf", "tokenizer.json"), own)


def write_model(name, spec, tok, procs, img_dir, out, seed):
    from safetensors.torch import save_file
    text_kw, vision_kw, proj, dtype, cfg_name, shard = spec
    config = CLIPConfig(text_config=dict(vocab_size=49408, max_position_embeddings=77, **text_kw),
                        vision_config=vision_kw, projection_dim=proj)
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    reinit(model, seed)
    d = os.path.join(out, name)
    model.to(dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, **kwargs)
    # A fresh tokenizer: calling one with padding=True stores padding/truncation state in its tokenizer.json.
    if os.path.islink(os.path.join(d, "tokenizer.json")):  # a rerun into the same --out: don't write through it
        os.remove(os.path.join(d, "tokenizer.json"))
    load_tokenizer().save_pretrained(d)
    link_shared_tokenizer(d, out)
    pil_proc = procs[cfg_name][0]
    pil_proc.save_pretrained(d)

    # Goldens from the weights as saved, computed in float32 (mmserve's CPU path upcasts the same way).
    ref = CLIPModel.from_pretrained(d, dtype=torch.float32).eval()
    enc = tok(GOLDEN_TEXTS, padding=True, truncation=True, max_length=77, return_tensors="pt")
    images = []
    for n in GOLDEN_IMAGES:
        im = Image.open(os.path.join(img_dir, n))
        im.load()
        images.append(im)
    pixels = pil_proc(images=images, return_tensors="pt")["pixel_values"].to(torch.float32)
    with torch.no_grad():
        o = ref(input_ids=enc.input_ids, attention_mask=enc.attention_mask, pixel_values=pixels)
    golden = {
        "input_ids": enc.input_ids.to(torch.int64), "attention_mask": enc.attention_mask.to(torch.int64),
        "pixel_values": pixels, "image_embeds": o.image_embeds, "text_embeds": o.text_embeds,
        "logits_per_image": o.logits_per_image,
        "text_last_hidden_state": o.text_model_output.last_hidden_state,
        "text_pooler_output": o.text_model_output.pooler_output,
        "vision_last_hidden_state": o.vision_model_output.last_hidden_state,
        "vision_pooler_output": o.vision_model_output.pooler_output,
    }
    save_file({k: v.contiguous() for k, v in golden.items()}, os.path.join(d, "golden.safetensors"))
    with open(os.path.join(d, "golden.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": GOLDEN_TEXTS, "images": GOLDEN_IMAGES, "preprocess": cfg_name,
                   "storage_dtype": str(dtype), "compute_dtype": "float32",
                   "transformers": transformers.__version__, "torch": torch.__version__}, f,
                  ensure_ascii=False, indent=1)
    files = sorted(os.listdir(d))
    print(f"model {name}: {files}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (copy its contents into tests/fixtures/)")
    args = ap.parse_args()
    torch.set_num_threads(4)
    out = os.path.abspath(args.out)
    img_dir = os.path.join(out, "images")
    os.makedirs(out, exist_ok=True)
    shutil.copytree(os.path.join(REPO, "tests", "fixtures", "images"), img_dir, dirs_exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, pillow {Image.__version__}")

    tok = load_tokenizer()
    write_tokens(tok, out)
    derive_images(img_dir)
    pil_cls, tv_cls = image_processor_classes()
    procs = make_processors(pil_cls, tv_cls, out)
    write_pixels(procs, img_dir, out)
    for i, (name, spec) in enumerate(MODELS.items()):
        write_model(name, spec, tok, procs, img_dir, out, seed=1234 + i)


if __name__ == "__main__":
    main()
