#!/usr/bin/env python3
"""Builds mmserve's Whisper tokenizer goldens with the reference implementations: tiktoken and HF transformers.

Run where tiktoken, tokenizers and transformers (>= 5) are installed (the GPU host; no GPU, no network needed):

    python3 tools/reference/make_whisper_tokens.py --out /tmp/fixtures   # then copy into tests/fixtures/

Inputs (in this repository): assets/whisper_tokenizer/multilingual.tiktoken and gpt2.tiktoken (openai-whisper's
rank files; whisper_multilingual.tiktoken / whisper_gpt2.tiktoken are accepted too). The encodings are built
exactly as openai-whisper's get_encoding builds them (whisper_tokenizers.py beside this script): "multilingual"
with 99 languages (51,865 ids), "multilingual_v3" with 100 (large-v3: 51,866 ids), "gpt2" with 99 (the .en
models: 51,864 ids). It writes:
  whisper/whisper_tokens.json
    tiktoken, transformers      versions used
    files                       sha256 of the rank files
    encodings.<name>            n_vocab, eot, timestamp_begin, special {name: id} (all of them, timestamps
                                included), non_speech_tokens and suppress_tokens (whisper's suppress "-1")
    special                     = encodings.multilingual.special
    entries[]                   {text, allowed_special, tiktoken_multilingual, tiktoken_multilingual_v3,
                                tiktoken_gpt2, hf_multilingual}: ids for 200+ strings. allowed_special=false is
                                plain text (encode(text, allowed_special=set(), disallowed_special=()): special
                                token text is encoded as ordinary text); true is encode(text, allowed_special=
                                "all"). Strings holding special-token text appear once in each mode.
                                hf_multilingual is HF's WhisperTokenizer (add_special_tokens=False, and
                                split_special_tokens=True for plain text), null where HF could not do it.
    hf_build, hf_mismatches     how the HF tokenizer was built offline; entries where HF != tiktoken
    decode[]                    {encoding, ids, note, bytes_hex (decode_bytes), tiktoken (decode, errors=
                                "replace"), whisper (whisper's Tokenizer.decode: timestamp ids dropped first),
                                hf (HF decode, skip_special_tokens=False) or null}: partial UTF-8 (an emoji cut
                                after each of its tokens, a slice starting mid-character, lone bytes, invalid
                                bytes), special and timestamp tokens, and the multilingual file's rank 50256,
                                which is the empty token (its line is "= 50256": base64 for zero bytes).

If openai-whisper is importable, its own get_encoding is compared with ours on every string (it is optional).
Pitfalls handled (see ../shared/REFERENCE_NOTES.md): the HF tokenizer is built from merges derived from the
ranks and checked against tiktoken and known ids before any golden is written.
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
import unicodedata

import tiktoken  # noqa: F401  (used through whisper_tokenizers; fail here if missing)
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import whisper_tokenizers as wt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENCODINGS = {  # name: (rank file, number of languages)
    "multilingual": ("multilingual", 99),
    "multilingual_v3": ("multilingual", 100),
    "gpt2": ("gpt2", 99),
}


def corpus():
    """200+ varied strings; every category named in the fixture README is here."""
    base = [
        # ASCII sentences, Whisper-style leading spaces
        "", " ", "a", "Hello world", " Hello world", "Hello, world!", "HELLO WORLD", "hello   world",
        " And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
        "country.", " The quick brown fox jumps over the lazy dog.", "The quick brown fox jumps over the lazy dog",
        " I'm not sure.", " Thank you.", " you", " Okay.", "mIxEd CaSe WoRdS", "camelCaseIdentifier",
        "snake_case_identifier", "kebab-case-identifier", "ALLCAPSWORDTHATISLONG", "supercalifragilisticexpialidocious",
        "pneumonoultramicroscopicsilicovolcanoconiosis",
        # contractions (GPT-2's regex is case-sensitive: 'S 'T 'RE ... are not contractions)
        "It's a dog's life", "they're, we've, I'm, you'll, he'd", "IT'S LOUD", "THEY'RE WE'VE I'M YOU'LL HE'D",
        "don't stop", "DON'T STOP", "'s", "'S", "'t'", "''s", "'ll've", "rock 'n' roll", "word's", "'quoted'",
        "O'Neil's", "y'all'd've", "I'D", "it'S", " 's", "x's's's",
        # punctuation runs
        "!!!???...", "--- *** ___", "...", "?!", ",,,,", "(parentheses) [brackets] {braces} <angles>",
        "\"quoted\" 'single'", "\u201csmart quotes\u201d \u2018single\u2019", "ellipsis\u2026",
        "em\u2014dash en\u2013dash", "a.b.c.d.e.f", "a,b;c:d", "a-b_c=d+e", "#hashtag @mention", "user@example.com",
        "https://example.com/path?q=1&r=2#frag", "C:\\path\\to\\file", "<html><body>tag</body></html>",
        "&amp; &lt; &gt;", "\u266a\u266a\u266a music \u266a", "[MUSIC]", "(SPEAKING FOREIGN LANGUAGE)", " -", " '",
        # numbers with separators
        "1234567890", "3.14159", "1,000,000 dollars", "1 000 000", "1.000.000,50 \u20ac", "3.14e-10", "-42",
        "+1-555-0100", "12:34:56", "2024-11-29T15:59:07Z", "v1.2.3-rc4", "1/2 3/4", "100%", "50\u00b0C",
        "\u0663\u0664\u0665 \u0968\u0969", "\u2460\u2461\u2462 \u00bd \u00b2 \u2155 \u216b", "\uff11\uff12\uff13",
        "1" * 40, "0.000000001", "$5 \u00a350 \u00a5300 \u20ac100",
        # whitespace runs, tabs, CR LF, trailing spaces
        "  leading", "trailing  ", "  both  ", "a  b", "a   b", "a \n b", "tab\tseparated\tvalues", "\t", "\t\t",
        "new\nline", "\n", "\n\n\n", "carriage\r\nreturn", "\r\n", "a\r\n\r\nb", "\r", " \t \n ", "x \n\n y  ",
        "end with newline\n", "   ", " " * 17, "form\ffeed", "vertical\vtab", "non\u00a0breaking\u00a0space",
        "ideographic\u3000space", "line\u2028separator", "zero\u200bwidth\u200bspace", "em\u2003space",
        "\u00a0", "\u3000\u3000",
        # Latin with diacritics, NFC vs NFD, other scripts
        "caf\u00e9", "cafe\u0301", "na\u00efve r\u00e9sum\u00e9", "\u00c5ngstr\u00f6m", "Stra\u00dfe", "STRASSE",
        "\u0130stanbul", "\u0131\u0130iI", "\u0141\u00f3d\u017a", "\u010ce\u0161tina", "Ti\u1ebfng Vi\u1ec7t",
        "\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
        "\u0423\u043a\u0440\u0430\u0457\u043d\u0430",
        # CJK, kana, Korean
        "\u4f60\u597d\uff0c\u4e16\u754c", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002",
        "\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u4e03\u516b\u4e5d\u5341", "\u732b\u306e\u5199\u771f",
        "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c", "\u30ab\u30bf\u30ab\u30ca", "\u3072\u3089\u304c\u306a",
        "\uff8a\uff9d\uff76\uff78\uff76\uff85", "\u30b3\u30fc\u30d2\u30fc", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
        "\ud55c\uad6d\uc5b4", "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165", "\U00020000 cjk ext b",
        # Arabic, Hebrew, Devanagari, Thai, others
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u0627\u0644\u0633\u0651\u064e\u0644\u0627\u0645\u064f \u0639\u064e\u0644\u064e\u064a\u0652\u0643\u064f\u0645\u0652",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
        "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u0532\u0561\u0580\u0587",
        "\u12a0\u121b\u122d\u129b", "\u0dc3\u0dd2\u0d82\u0dc4\u0dbd", "\u0baa\u0bc6\u0bbe\u0ba4\u0bc1",
        "\u1019\u103c\u1014\u103a\u1019\u102c", "\u0f56\u0f7c\u0f51\u0f0b",
        # emoji: single, ZWJ sequences, flags, skin tones, keycaps, tags
        "\U0001f600", "\U0001f408 cat emoji", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
        "\U0001f469\u200d\U0001f4bb", "\U0001f44d\U0001f3fd thumbs", "\U0001f1eb\U0001f1f7 flag",
        "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea", "\u2764\ufe0f love", "1\ufe0f\u20e3 keycap",
        "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", "\U0001f3f3\ufe0f\u200d\U0001f308",
        "\u2603 snowman", "\U0001f389\U0001f389\U0001f389", "a\U0001f600b", " \U0001f600",
        # combining marks
        "\u0301 leading combining", "e\u0301\u0302\u0303", "Z\u0351\u036b\u0343a\u0310\u0357l\u0363g\u0352o",
        "a\u20dd", "\u1e9b\u0323", "\u212b", "A\u030a",
        # NFC vs NFD pairs are appended below; symbols and odd code points
        "\u2122 \u00a9 \u00ae", "\u221e \u2211 \u222b \u221a", "\u2190\u2191\u2192\u2193", "\u2500\u2502\u250c\u2510",
        "\ufb01 ligature", "\U0001d400\U0001d401 math bold", "\x00null byte", "\x07bell", "\x1b[31mansi\x1b[0m",
        "\ufeffbom", "\ufffd replacement", "\U0010ffff max", "\ud7ff edge", "\u00ff\u0100", "\x7f\x80\x9f",
        # special-token text (also encoded with allowed_special="all", see below)
        "<|endoftext|>", "a <|endoftext|> b", "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>",
        "<|startoftranscript|><|yue|><|translate|>", "<|0.00|> Hello<|1.50|>", "<|30.00|><|29.98|>",
        "<|nospeech|>", "<|startofprev|> prompt", "<|startoflm|>", "<|endoftext", "endoftext|>", "<|ENDOFTEXT|>",
        "< |endoftext| >", "<|unknown|>", "<|30.02|>", "<|0.01|>", "<|en|><|xx|>", "x<|endoftext|>y<|endoftext|>z",
        "<|endoftext|><|endoftext|>", "<|", "|>", "<||>",
    ]
    nfc_nfd = ["caf\u00e9 na\u00efve", "\u00c5\u00e5\u00c7\u00e7\u00d1\u00f1", "\ud55c\uae00",
               "\u1ea0\u1eb7\u1ec7", "\u0390\u03b0", "\u304c\u3071"]
    for s in nfc_nfd:
        base += [unicodedata.normalize("NFC", s), unicodedata.normalize("NFD", s)]
    long_texts = [
        "x" * 300, " " * 300 + "y", "ab" * 100, "1234567890" * 30, "\u732b" * 200, "\U0001f600" * 60,
        "The quick brown fox jumps over the lazy dog. " * 10, " ".join(f"word{i}" for i in range(150)),
    ]
    mix = ("Whisper is a general-purpose speech recognition model. \u4f60\u597d, \u4e16\u754c! "
           "\U0001f468\u200d\U0001f469\u200d\U0001f467 It's 12:34, caf\u00e9\t\u0645\u0631\u062d\u0628\u0627 \r\n"
           "  \u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 <|endoftext|> 1,234.5   ")
    long_texts.append((mix * (2000 // len(mix) + 1))[:2000])
    assert len(long_texts[-1]) == 2000
    words = ["speech", "recognition", "audio", "transcribe", "translate", "model", "the", "of", "and", "a",
             "Whisper", "English", "language", "timestamp", "token", "decoder", "encoder", "mel", "beam", "greedy"]
    generated = [f" {words[i % 20]} {words[(i * 7 + 3) % 20]}, {words[(i * 11 + 5) % 20]} #{i}." for i in range(20)]
    items = base + long_texts + generated
    assert len(set(items)) == len(items), "duplicate corpus strings"
    # Lone surrogates cannot be UTF-8 (nor portable JSON); none should be here.
    assert all(not (0xD800 <= ord(c) <= 0xDFFF) for s in items for c in s)
    return items


def encode_all(encodings, hf_tok, text, allowed_special):
    entry = {"text": text, "allowed_special": allowed_special}
    for name, enc in encodings.items():
        if allowed_special:
            ids = enc.encode(text, allowed_special="all")
        else:
            ids = enc.encode(text, allowed_special=set(), disallowed_special=())
            assert ids == enc.encode_ordinary(text)
        entry[f"tiktoken_{name}"] = ids
    try:
        ids = wt.hf_encode(hf_tok, text, split_special=not allowed_special)
        if not allowed_special and any(i >= encodings["multilingual"].eot_token for i in ids):
            print(f"  hf ignored split_special_tokens=True on {text[:30]!r}: recorded as null")
            ids = None
    except Exception as e:  # noqa: BLE001  (recorded as null: HF may not support split_special_tokens)
        print(f"  hf could not encode {text[:30]!r} (allowed_special={allowed_special}): {type(e).__name__}: {e}")
        ids = None
    entry["hf_multilingual"] = ids
    return entry


def decode_cases(enc):
    """(ids, note) pairs for the multilingual encoding, chosen to cut UTF-8 sequences."""
    sp = enc._special_tokens
    byte = {b: enc.encode_single_token(bytes([b])) for b in range(256)}
    cases = []
    family = enc.encode("\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466")
    for k in range(1, len(family) + 1):
        cases.append((family[:k], f"ZWJ family emoji, first {k} of {len(family)} tokens"))
    mixed = enc.encode(" h\u00e9llo w\u00f6rld \u4f60\u597d \U0001f389 \ud55c\uad6d\uc5b4")
    for i, j in [(1, len(mixed)), (2, len(mixed) - 1), (len(mixed) // 2, len(mixed)), (3, 5)]:
        cases.append((mixed[i:j], f"slice [{i}:{j}] of a mixed-script string"))
    for t in enc.encode("\u4f60\u597d\U0001f600\u0645\u0631"):
        cases.append(([t], "one token of a multibyte string"))
    cases += [
        ([byte[0xE4]], "lone lead byte of a 3-byte sequence"),
        ([byte[0xE4], byte[0xBD]], "3-byte sequence missing its last byte"),
        ([byte[0xE4], byte[0xBD]] + enc.encode("abc"), "truncated 3-byte sequence then ASCII"),
        ([byte[0xF0], byte[0x9F], byte[0x98]] + enc.encode("x"), "truncated 4-byte sequence then ASCII"),
        ([byte[0x80]], "lone continuation byte"),
        ([byte[0x80], byte[0x80], byte[0xBF]], "three continuation bytes"),
        ([byte[0xC0], byte[0xAF]], "overlong encoding of '/'"),
        ([byte[0xED], byte[0xA0], byte[0x80]], "UTF-8 encoded surrogate U+D800"),
        ([byte[0xF4], byte[0x90], byte[0x80], byte[0x80]], "code point above U+10FFFF"),
        ([byte[0xFF], byte[0xFE]], "bytes never valid in UTF-8"),
        ([byte[0xC3]] + enc.encode(" ok"), "2-byte lead followed by a space"),
        (enc.encode("caf") + [byte[0xC3], byte[0xA9]], "valid 2-byte sequence from byte tokens"),
        ([sp["<|startoftranscript|>"], sp["<|en|>"], sp["<|transcribe|>"], sp["<|notimestamps|>"]]
         + enc.encode(" Hello world.") + [sp["<|endoftext|>"]], "prompt, text, end of text"),
        ([sp["<|startoftranscript|>"], sp["<|en|>"], sp["<|transcribe|>"], sp["<|0.00|>"]]
         + enc.encode(" Hello world.") + [sp["<|1.50|>"], sp["<|1.50|>"]] + enc.encode(" Bye.")
         + [sp["<|30.00|>"], sp["<|endoftext|>"]], "timestamps (whisper's decode drops them)"),
        ([sp["<|startofprev|>"]] + enc.encode(" previous text") + [sp["<|startoftranscript|>"]],
         "previous-text prompt"),
        ([sp["<|nospeech|>"], sp["<|startoflm|>"], sp["<|translate|>"]], "other special tokens"),
        ([], "empty"),
        ([50256] + enc.encode(" a") + [50256], "rank 50256 of the multilingual file is the empty token"),
    ]
    return cases


def decode_entries(enc, hf_tok):
    ts_begin = enc._special_tokens["<|0.00|>"]
    out = []
    for ids, note in decode_cases(enc):
        raw = enc.decode_bytes(ids)
        entry = {"encoding": "multilingual", "ids": ids, "note": note, "bytes_hex": raw.hex(),
                 "tiktoken": enc.decode(ids, errors="replace"),
                 "whisper": enc.decode([t for t in ids if t < ts_begin], errors="replace")}
        assert entry["tiktoken"] == raw.decode("utf-8", errors="replace")
        try:
            entry["hf"] = hf_tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        except Exception as e:  # noqa: BLE001
            print(f"  hf could not decode {note}: {type(e).__name__}: {e}")
            entry["hf"] = None
        out.append(entry)
    return out


def check_openai_whisper(encodings, entries):
    """Compares with openai-whisper's own get_encoding when that package is installed; returns its version."""
    try:
        import whisper.tokenizer as owt
    except Exception as e:  # noqa: BLE001  (optional: absent, or another package named whisper, or broken deps)
        print(f"openai-whisper not usable ({type(e).__name__}: {e}): skipping the cross-check with its get_encoding")
        return None
    assert list(owt.LANGUAGES) == list(wt.LANGUAGES), "LANGUAGES differs from openai-whisper's"
    theirs = {"multilingual": owt.get_encoding("multilingual", 99),
              "multilingual_v3": owt.get_encoding("multilingual", 100), "gpt2": owt.get_encoding("gpt2", 99)}
    for name, enc in theirs.items():
        assert enc._special_tokens == encodings[name]._special_tokens, f"{name}: special tokens differ"
        for e in entries:
            kw = {"allowed_special": "all"} if e["allowed_special"] else {"disallowed_special": ()}
            assert enc.encode(e["text"], **kw) == e[f"tiktoken_{name}"], f"{name}: {e['text'][:40]!r}"
    version = importlib.metadata.version("openai-whisper")
    print(f"openai-whisper {version}: identical on all {len(entries)} entries")
    return version


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (copy its contents into tests/fixtures/)")
    ap.add_argument("--tokenizer-dir", default=os.path.join(REPO, "assets", "whisper_tokenizer"),
                    help="folder holding multilingual.tiktoken and gpt2.tiktoken")
    args = ap.parse_args()
    out_dir = os.path.join(os.path.abspath(args.out), "whisper")
    os.makedirs(out_dir, exist_ok=True)
    tiktoken_version = importlib.metadata.version("tiktoken")
    print(f"tiktoken {tiktoken_version}, transformers {transformers.__version__}")

    try:
        paths = {name: wt.rank_file(args.tokenizer_dir, f) for name, (f, _) in ENCODINGS.items()}
    except FileNotFoundError as e:
        sys.exit(f"{e}: the Whisper rank files belong in assets/whisper_tokenizer/")
    encodings = {name: wt.tiktoken_encoding(paths[name], n) for name, (_, n) in ENCODINGS.items()}
    n_vocab = {name: e.n_vocab for name, e in encodings.items()}
    assert n_vocab == {"multilingual": 51865, "multilingual_v3": 51866, "gpt2": 51864}, n_vocab
    ml = encodings["multilingual"]
    for name, known in (("multilingual", wt.KNOWN_MULTILINGUAL), ("gpt2", wt.KNOWN_GPT2)):
        for text, ids in known.items():
            assert encodings[name].encode(text) == ids, (name, text, encodings[name].encode(text))
    sp = ml._special_tokens
    assert (sp["<|endoftext|>"], sp["<|startoftranscript|>"], sp["<|translate|>"], sp["<|transcribe|>"],
            sp["<|notimestamps|>"], sp["<|0.00|>"]) == (50257, 50258, 50358, 50359, 50363, 50364)
    assert wt.suppress_tokens(ml) == wt.KNOWN_SUPPRESS_MULTILINGUAL

    # The staging folder outlives the tokenizer's use: a tokenizer may refer back to the files it was loaded from.
    staging = tempfile.TemporaryDirectory()
    hf_tok, hf_build = wt.build_hf_tokenizer(paths["multilingual"], 99, ml, staging.name)
    print(f"HF tokenizer: {type(hf_tok).__name__} via {hf_build}")

    entries = []
    for text in corpus():
        entries.append(encode_all(encodings, hf_tok, text, allowed_special=False))
        if "<|" in text:
            entries.append(encode_all(encodings, hf_tok, text, allowed_special=True))
    assert len(entries) >= 200, len(entries)
    mismatches = [i for i, e in enumerate(entries)
                  if e["hf_multilingual"] is not None and e["hf_multilingual"] != e["tiktoken_multilingual"]]
    for i in mismatches:
        print(f"  HF != tiktoken: {entries[i]['text'][:40]!r} allowed_special={entries[i]['allowed_special']}")
    openai_version = check_openai_whisper(encodings, entries)

    files = {}
    for p in sorted(set(paths.values())):
        with open(p, "rb") as f:
            files[os.path.basename(p)] = hashlib.sha256(f.read()).hexdigest()
    enc_info = {}
    for name, enc in encodings.items():
        enc_info[name] = {
            "rank_file": os.path.basename(paths[name]), "num_languages": ENCODINGS[name][1], "n_vocab": enc.n_vocab,
            "eot": enc.eot_token, "timestamp_begin": enc._special_tokens["<|0.00|>"],
            "special": dict(sorted(enc._special_tokens.items(), key=lambda kv: kv[1])),
            "non_speech_tokens": wt.non_speech_tokens(enc), "suppress_tokens": wt.suppress_tokens(enc),
        }
    doc = {
        "tiktoken": tiktoken_version, "transformers": transformers.__version__, "openai_whisper": openai_version,
        "pat_str": wt.PAT_STR, "files": files, "encodings": enc_info, "special": enc_info["multilingual"]["special"],
        "hf_build": hf_build, "hf_class": type(hf_tok).__name__, "hf_mismatches": mismatches,
        "entries": entries, "decode": decode_entries(ml, hf_tok),
    }
    path = os.path.join(out_dir, "whisper_tokens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
    staging.cleanup()
    print(f"tokens: {len(entries)} entries, {len(doc['decode'])} decode cases, {len(mismatches)} HF mismatches "
          f"-> {path} ({os.path.getsize(path) // 1024} kB)")


if __name__ == "__main__":
    main()
