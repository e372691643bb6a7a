"""Whisper's tokenizers built offline from the .tiktoken ranks: openai-whisper's tiktoken encoding and HF's.

Shared by make_whisper_tokens.py and make_whisper_fixtures.py (import it from the same folder; it is no script).

- tiktoken_encoding() builds the tiktoken.Encoding exactly as openai-whisper's whisper/tokenizer.py get_encoding
  does (same ranks parsing, GPT-2 regex, special tokens appended in the same order, explicit_n_vocab). The
  LANGUAGES table below is copied from that file (openai/whisper @ c0d2f624): 100 entries, the first 99 for
  the classic multilingual vocab (51,865 ids), all 100 for large-v3 (51,866 ids; "yue" added).
- build_hf_tokenizer() makes an HF transformers WhisperTokenizer without the Hub. The BPE merges are derived from
  the ranks: every token of rank r (two bytes or more) splits into exactly two parts when BPE is run on its own
  bytes with ranks < r only (asserted); that pair is merge number r - 256 (tiktoken's educational
  recover-merges). Tokens and merges are written with GPT-2's byte-to-unicode mapping. A `tokenizers` BPE model
  with the ByteLevel pre-tokenizer (GPT-2's regex, no prefix space) and ByteLevel decoder, plus the special
  tokens as added tokens (timestamps as non-special added tokens, as in HF's own Whisper files), then encodes
  like tiktoken. Because transformers 5's WhisperTokenizer constructor is not documented for this, several ways
  of wrapping it are tried and the first one that reproduces tiktoken on HARD_STRINGS and every special id is
  kept (see REFERENCE_NOTES.md: a wrongly built HF tokenizer fails silently).
"""
import base64
import json
import os

LANGUAGES = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian", "ko": "korean",
    "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish", "pl": "polish", "ca": "catalan",
    "nl": "dutch", "ar": "arabic", "sv": "swedish", "it": "italian", "id": "indonesian", "hi": "hindi",
    "fi": "finnish", "vi": "vietnamese", "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay",
    "cs": "czech", "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian", "la": "latin",
    "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak", "te": "telugu", "fa": "persian",
    "lv": "latvian", "bn": "bengali", "sr": "serbian", "az": "azerbaijani", "sl": "slovenian", "kn": "kannada",
    "et": "estonian", "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian", "sw": "swahili",
    "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala", "km": "khmer", "sn": "shona",
    "yo": "yoruba", "so": "somali", "af": "afrikaans", "oc": "occitan", "ka": "georgian", "be": "belarusian",
    "tg": "tajik", "sd": "sindhi", "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao",
    "uz": "uzbek", "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk",
    "mt": "maltese", "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan",
    "tl": "tagalog", "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian", "ln": "lingala",
    "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}
assert len(LANGUAGES) == 100 and list(LANGUAGES)[98:] == ["su", "yue"]

# GPT-2's pre-tokenizer regex, as in openai-whisper (case-sensitive: "'S" is not a contraction).
PAT_STR = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Checked on this repository's files with an independent pure-Python BPE: tiktoken's ids for these strings.
KNOWN_MULTILINGUAL = {" And so my fellow Americans": [400, 370, 452, 7177, 6280], "Hello world": [15947, 1002],
                      " Hello world": [2425, 1002]}
KNOWN_GPT2 = {"Hello world": [15496, 995], " Hello world": [18435, 995]}
# openai/whisper-tiny's generation_config.json suppress_tokens (= whisper's "-1": non-speech tokens + specials).
KNOWN_SUPPRESS_MULTILINGUAL = [
    1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359, 503, 522, 542, 873,
    893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627, 3246, 3253, 3268, 3536, 3846, 3961, 4183, 4667, 6585,
    6647, 7273, 9061, 9383, 10428, 10929, 11938, 12033, 12331, 12562, 13793, 14157, 14635, 15265, 15618, 16553,
    16604, 18362, 18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302, 32470, 36865,
    42863, 47425, 49870, 50254, 50258, 50358, 50359, 50360, 50361, 50362]

# Strings an HF tokenizer must encode exactly like tiktoken before it is trusted (allowed_special="all").
HARD_STRINGS = [
    "", " ", "Hello world", " Hello world", " And so my fellow Americans, ask not what your country can do for you.",
    "It's IT'S they're we've I'm you'll he'd 'S 'T", "  two  spaces  ", "trailing   ", "\t\ttabs\t", "a\r\nb\n\n",
    "1,234,567.89 3.14e-10 12:34", "!!!???...---", "caf\u00e9 cafe\u0301", "\u4f60\u597d\uff0c\u4e16\u754c",
    "\u3053\u3093\u306b\u3061\u306f", "\uc548\ub155\ud558\uc138\uc694", "\u0645\u0631\u062d\u0628\u0627",
    "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7 \U0001f44d\U0001f3fd",
    "<|endoftext|>", "a<|startoftranscript|><|en|><|transcribe|><|notimestamps|> b<|0.00|><|30.00|>",
    "<|nospeech|><|startofprev|><|startoflm|><|translate|>", "<|endoftext", "x" * 300, " " * 50 + "y",
]


def rank_file(folder, name):
    """The rank file `name` ("multilingual" or "gpt2") in `folder`: openai's file name, or with a whisper_ prefix."""
    for candidate in (f"{name}.tiktoken", f"whisper_{name}.tiktoken"):
        path = os.path.join(folder, candidate)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no {name}.tiktoken (nor whisper_{name}.tiktoken) in {folder}")


def load_ranks(path):
    """Parses a .tiktoken file exactly as whisper's get_encoding: base64 token, rank per line."""
    with open(path) as f:
        return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in f if line)}


def special_token_names(num_languages):
    """openai-whisper's special tokens in id order, appended after the ranks."""
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *[f"<|{lang}|>" for lang in list(LANGUAGES.keys())[:num_languages]],
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
        *[f"<|{i * 0.02:.2f}|>" for i in range(1501)],
    ]


def special_tokens(ranks, num_languages):
    return {name: len(ranks) + i for i, name in enumerate(special_token_names(num_languages))}


def tiktoken_encoding(path, num_languages):
    """The tiktoken.Encoding of whisper/tokenizer.py get_encoding(name, num_languages), from `path`."""
    import tiktoken
    ranks = load_ranks(path)
    specials = special_tokens(ranks, num_languages)
    return tiktoken.Encoding(
        name=os.path.basename(path),
        explicit_n_vocab=len(ranks) + len(specials),
        pat_str=PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=specials,
    )


def non_speech_tokens(encoding):
    """whisper.tokenizer.Tokenizer.non_speech_tokens, verbatim in behaviour."""
    symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
    symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
    miscellaneous = set("♩♪♫♬♭♮♯")
    assert all(0x2640 <= ord(c) <= 0x267F for c in miscellaneous)
    result = {encoding.encode(" -")[0], encoding.encode(" '")[0]}
    for symbol in symbols + list(miscellaneous):
        for tokens in [encoding.encode(symbol), encoding.encode(" " + symbol)]:
            if len(tokens) == 1 or symbol in miscellaneous:
                result.add(tokens[0])
    return sorted(result)


def suppress_tokens(encoding):
    """whisper.decoding's suppress_tokens="-1": non-speech tokens plus the task/prompt special tokens."""
    sp = encoding._special_tokens
    ids = non_speech_tokens(encoding) + [sp["<|transcribe|>"], sp["<|translate|>"], sp["<|startoftranscript|>"],
                                         sp["<|startofprev|>"], sp["<|startoflm|>"], sp["<|nospeech|>"]]
    return sorted(set(ids))


# ------------------------------------------------------------------------------------------- HF tokenizer
def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character mapping (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def _bpe(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < max_rank and (best is None or rank < best[1]):
                best = (i, rank)
        if best is None:
            return parts
        i = best[0]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def vocab_and_merges(ranks):
    """HF BPE vocab {byte-level string: id} and merges [(left, right)] in rank order, derived from the ranks."""
    byte_encoder = bytes_to_unicode()

    def to_str(b):
        return "".join(byte_encoder[x] for x in b)

    singles = sorted(r for t, r in ranks.items() if len(t) == 1)
    assert len(singles) == 256, "every byte must be a token"
    vocab = {to_str(t): r for t, r in ranks.items()}
    assert len(vocab) == len(ranks)
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:  # the bytes, and the multilingual file's empty token ("=" -> b"", rank 50256)
            continue
        parts = _bpe(ranks, token, rank)
        assert len(parts) == 2, f"rank {rank} does not split into two lower-rank parts: {parts}"
        merges.append((to_str(parts[0]), to_str(parts[1])))
    return vocab, merges


def rust_tokenizer(ranks, num_languages):
    """A `tokenizers.Tokenizer` equivalent to the tiktoken encoding (added tokens for the specials)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    vocab, merges = vocab_and_merges(ranks)
    # The multilingual file's rank 50256 is the empty token ("=" decodes to b""); it stays in the vocab so that
    # the ids stay contiguous and the specials start at 50257.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    names = special_token_names(num_languages)
    n_special = names.index("<|notimestamps|>") + 1
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in names[:n_special]])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in names[n_special:]])
    for name, i in special_tokens(ranks, num_languages).items():
        assert tok.token_to_id(name) == i, (name, tok.token_to_id(name), i)
    return tok, vocab, merges


def _write_staging_dir(d, rust_tok, vocab, merges, ranks, num_languages):
    """An HF-format tokenizer folder written by hand (the files HF's Whisper repos carry)."""
    os.makedirs(d, exist_ok=True)
    rust_tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    specials = special_tokens(ranks, num_languages)
    with open(os.path.join(d, "added_tokens.json"), "w", encoding="utf-8") as f:
        json.dump(specials, f, ensure_ascii=False, indent=1)
    names = special_token_names(num_languages)
    extra = names[1:names.index("<|notimestamps|>") + 1]
    eot = "<|endoftext|>"
    with open(os.path.join(d, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": eot, "eos_token": eot, "unk_token": eot, "pad_token": eot,
                   "additional_special_tokens": extra}, f, indent=1)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "WhisperTokenizer", "bos_token": eot, "eos_token": eot, "unk_token": eot,
                   "pad_token": eot, "add_prefix_space": False, "errors": "replace", "model_max_length": 1024,
                   "clean_up_tokenization_spaces": False}, f, indent=1)


def hf_encode(tok, text, split_special=False):
    """HF ids without the Whisper prefix/suffix; split_special=True encodes special-token text as plain text."""
    if split_special:
        return list(tok(text, add_special_tokens=False, split_special_tokens=True).input_ids)
    return list(tok(text, add_special_tokens=False).input_ids)


def hf_mismatches(tok, encoding, strings=HARD_STRINGS):
    """Where an HF tokenizer differs from the tiktoken encoding; empty when it can be trusted."""
    bad = []
    n_vocab = encoding.n_vocab
    if len(tok) != n_vocab:
        bad.append(f"len(tokenizer) {len(tok)} != {n_vocab}")
    for name, i in encoding._special_tokens.items():
        got = tok.convert_tokens_to_ids(name)
        if got != i:
            bad.append(f"{name} -> {got}, tiktoken {i}")
            if len(bad) > 20:
                return bad
    for s in strings:
        want = encoding.encode(s, allowed_special="all")
        try:
            got = hf_encode(tok, s)
        except Exception as e:  # noqa: BLE001  (a broken candidate must not stop the search)
            got = f"{type(e).__name__}: {e}"
        if got != want:
            bad.append(f"{s[:40]!r}: hf {got if isinstance(got, str) else got[:12]} tiktoken {want[:12]}")
    return bad


def build_hf_tokenizer(ranks_path, num_languages, encoding, staging_dir):
    """Returns (transformers tokenizer, how it was built) reproducing `encoding`, or exits listing every failure."""
    import sys

    import transformers
    from tokenizers import AddedToken

    ranks = load_ranks(ranks_path)
    rust_tok, vocab, merges = rust_tokenizer(ranks, num_languages)
    _write_staging_dir(staging_dir, rust_tok, vocab, merges, ranks, num_languages)
    eot = "<|endoftext|>"
    specials = dict(bos_token=eot, eos_token=eot, unk_token=eot, pad_token=eot)
    names = special_token_names(num_languages)
    n_special = names.index("<|notimestamps|>") + 1

    def from_vocab_merges():
        tok = transformers.WhisperTokenizer(vocab=vocab, merges=merges, **specials)
        tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in names[:n_special]],
                       special_tokens=True)
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in names[n_special:]])
        return tok

    candidates = [
        ("WhisperTokenizer.from_pretrained(hand-written folder: tokenizer.json, vocab.json, merges.txt, ...)",
         lambda: transformers.WhisperTokenizer.from_pretrained(staging_dir)),
        ("WhisperTokenizer(tokenizer_object=tokenizers.Tokenizer built from the ranks)",
         lambda: transformers.WhisperTokenizer(tokenizer_object=rust_tok, **specials)),
        ("WhisperTokenizer(vocab=dict, merges=list) + added special tokens", from_vocab_merges),
        ("AutoTokenizer.from_pretrained(hand-written folder)",
         lambda: transformers.AutoTokenizer.from_pretrained(staging_dir)),
        ("PreTrainedTokenizerFast(tokenizer_object=...) (generic class, not WhisperTokenizer)",
         lambda: transformers.PreTrainedTokenizerFast(tokenizer_object=rust_tok, **specials)),
    ]
    failures = []
    for how, make in candidates:
        try:
            tok = make()
        except Exception as e:  # noqa: BLE001
            failures.append(f"{how}: {type(e).__name__}: {e}")
            continue
        bad = hf_mismatches(tok, encoding)
        if not bad:
            return tok, how
        failures.append(f"{how}: {len(bad)} mismatches, first {bad[:3]}")
    sys.exit("no way of building the HF Whisper tokenizer reproduced tiktoken:\n  " + "\n  ".join(failures))
