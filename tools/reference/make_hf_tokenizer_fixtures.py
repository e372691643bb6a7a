#!/usr/bin/env python3
"""Writes mmserve's small hand-made tokenizer.json fixtures (tests/fixtures/hf_tokenizers/<name>/).

They exercise the HF `tokenizers` components that the two real npm tokenizers (Llama 3.1, Mistral) do not:
Metaspace (prepend_scheme first / always / never, split, the legacy add_prefix_space form), Digits, NFKC, NFD,
NFKD, Strip, Prepend, Lowercase, regex Replace, Whitespace / WhitespaceSplit, Split behaviours and invert,
ByteLevel with add_prefix_space, BPE with byte_fallback, unk_token + fuse_unk, continuing_subword_prefix,
ignore_merges, TemplateProcessing with pairs, and added tokens with lstrip / rstrip / single_word / normalized.
The files are inputs, not goldens: their vocabularies come from a tiny BPE training run here (plain Python, no
dependency), and the expected ids come from HF on the GPU host (hf_tokenizer_goldens.py). Run:

    python3 tools/reference/make_hf_tokenizer_fixtures.py --out tests/fixtures/hf_tokenizers
"""
import argparse
import collections
import json
import os

CORPUS = """the quick brown fox jumps over the lazy dog. hello world, hello there! numbers 12345 and 2026.
tokenizers split words into pieces; the pieces merge into tokens. cafe caffe coffee. she sells sea shells.
unbelievable understanding internationalization running jumped jumping"""


def train(words, alphabet, n_merges, prefix=""):
    """Plain BPE training: words -> (merges, tokens). Symbols after the first of a word carry `prefix`."""
    split = collections.Counter()
    for w in words:
        chars = [c if i == 0 else prefix + c for i, c in enumerate(w)]
        split[tuple(chars)] += 1
    merges, tokens = [], []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for syms, n in split.items():
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merged = a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)
        merges.append(f"{a} {b}")
        tokens.append(merged)
        new = collections.Counter()
        for syms, n in split.items():
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            new[tuple(out)] += n
        split = new
    return merges, tokens


def vocab_of(lists):
    vocab = {}
    for tok in (t for lst in lists for t in lst):
        if tok not in vocab:
            vocab[tok] = len(vocab)
    return vocab


def added(id_, content, special, **flags):
    t = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": not special, "special": special}
    t.update(flags)
    return t


def bpe(vocab, merges, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": merges}
    m.update(kw)
    return m


def template(single, pair, specials):
    def items(spec):
        out = []
        for part in spec.split():
            name, _, type_id = part.partition(":")
            type_id = int(type_id or 0)
            if name in ("$A", "$B"):
                out.append({"Sequence": {"id": name[1], "type_id": type_id}})
            else:
                out.append({"SpecialToken": {"id": name, "type_id": type_id}})
        return out
    return {"type": "TemplateProcessing", "single": items(single), "pair": items(pair),
            "special_tokens": {k: {"id": k, "ids": [v], "tokens": [k]} for k, v in specials.items()}}


def sp_metaspace():
    """SentencePiece-like: NFKC, Metaspace(first, split) + Digits, byte_fallback BPE, <s> $A </s>."""
    words = ["\u2581" + w for w in CORPUS.replace("\n", " ").split()]
    alphabet = sorted(set("".join(words)) - set("0123456789"))
    merges, tokens = train([w for w in words if not any(c.isdigit() for c in w)], alphabet, 120)
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    vocab = vocab_of([specials, byte_tokens, alphabet, list("0123456789"), tokens, ["<mask>", "[X]"]])
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>", True), added(1, "<s>", True), added(2, "</s>", True),
                         added(vocab["<mask>"], "<mask>", True, lstrip=True),
                         added(vocab["[X]"], "[X]", False, rstrip=True),
                         added(len(vocab), "hello", False, single_word=True, normalized=False)],
        "normalizer": {"type": "NFKC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
            {"type": "Digits", "individual_digits": True}]},
        "post_processor": template("<s> $A </s>", "<s> $A </s> $B:1 </s>:1", {"<s>": 1, "</s>": 2}),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"},
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}]},
        "model": bpe(vocab, merges, unk_token="<unk>", byte_fallback=True),
    }, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "mask_token": "<mask>", "clean_up_tokenization_spaces": False}


def metaspace_legacy():
    """Old serialisation: Metaspace {add_prefix_space: true} (prepend always), NFC + Lowercase + regex Replace."""
    words = ["\u2581" + w for w in CORPUS.lower().replace("\n", " ").split()]
    alphabet = sorted(set("".join(words)))
    merges, tokens = train(words, alphabet, 150)
    vocab = vocab_of([["<unk>", "<s>", "</s>"], alphabet, tokens])
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>", True), added(1, "<s>", True), added(2, "</s>", True)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Lowercase"},
            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "model": bpe(vocab, merges, unk_token="<unk>", fuse_unk=True),
    }, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "clean_up_tokenization_spaces": False}


def subword_prefix():
    """NFD + strip accents (regex Replace) + Strip + Prepend, Whitespace, ## prefix, ignore_merges, fuse_unk."""
    import re
    words = re.findall(r"\w+|[^\w\s]+", CORPUS.lower())
    alphabet = sorted(set("".join(words)))
    merges, tokens = train(words, alphabet, 150, prefix="##")
    cont = ["##" + c for c in alphabet]
    vocab = vocab_of([["[UNK]", "[CLS]", "[SEP]"], alphabet, cont, tokens, ["unbelievable"]])
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "[UNK]", True), added(1, "[CLS]", True), added(2, "[SEP]", True),
                         added(len(vocab), "<sep/>", True, lstrip=True, rstrip=True)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFD"}, {"type": "Replace", "pattern": {"Regex": "\\p{Mn}"}, "content": ""},
            {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Prepend", "prepend": "~"}]},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            template("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", {"[CLS]": 1, "[SEP]": 2})]},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "##"}, "content": ""},
            {"type": "Replace", "pattern": {"Regex": "~+"}, "content": "_"},
            {"type": "Strip", "content": "_", "start": 1, "stop": 0}]},
        "model": bpe(vocab, merges, unk_token="[UNK]", fuse_unk=True, ignore_merges=True,
                     continuing_subword_prefix="##"),
    }, {"tokenizer_class": "PreTrainedTokenizerFast", "cls_token": "[CLS]", "sep_token": "[SEP]",
        "unk_token": "[UNK]", "clean_up_tokenization_spaces": True}


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_level_split():
    """NFKD + Strip(left) , Split(string, MergedWithNext) + WhitespaceSplit-free ByteLevel(add_prefix_space)."""
    table = bytes_to_unicode()
    words = [table[32] + "".join(table[b] for b in w.encode()) for w in CORPUS.replace("\n", " ").split()]
    alphabet = [table[b] for b in range(256)]
    merges, tokens = train(words, alphabet, 150)
    vocab = vocab_of([["<|end|>"], alphabet, tokens, ["<|tool|>"]])
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<|end|>", True), added(vocab["<|tool|>"], "<|tool|>", True, rstrip=True)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKD"}, {"type": "Strip", "strip_left": True, "strip_right": False}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": ","}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Contiguous", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[a-z]+"}, "behavior": "MergedWithPrevious", "invert": True},
            {"type": "WhitespaceSplit"},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": bpe(vocab, merges),
    }, {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|end|>", "clean_up_tokenization_spaces": False}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    for name, make in [("sp_metaspace", sp_metaspace), ("metaspace_legacy", metaspace_legacy),
                       ("subword_prefix", subword_prefix), ("byte_level_split", byte_level_split)]:
        tokenizer, config = make()
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False, indent=1)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)
        print(name, len(tokenizer["model"]["vocab"]), "tokens,", len(tokenizer["model"]["merges"]), "merges")


if __name__ == "__main__":
    main()
