#!/usr/bin/env python3
"""Builds mmserve's Whisper conformance fixtures with HF transformers: tiny random models, log-mel and decoding goldens.

Run where torch, transformers (>= 5), tokenizers, tiktoken, numpy and safetensors are installed (the GPU host; it
runs on the CPU and needs no network):

    python3 tools/reference/make_whisper_fixtures.py --out /tmp/fixtures   # then copy into tests/fixtures/

Inputs (in this repository): tests/fixtures/audio/jfk.wav (real speech, 16 kHz s16 mono), the Whisper rank file
assets/whisper_tokenizer/multilingual.tiktoken and, when present, openai's mel filters converted to
tests/fixtures/whisper/mel_filters.safetensors (by convert_whisper_mel_filters.py; only for logmel_golden.json).
Everything is computed in float32 on the CPU. It writes, under whisper/:
  logmel_golden.safetensors    HF WhisperFeatureExtractor(feature_size=80) log-mel, F32 [80,3000]: logmel_jfk
                               (jfk.wav read with `wave`, int16 / 32768.0 as float32, like openai-whisper's
                               load_audio) and logmel_synthetic (1 s of 440 Hz at amplitude 0.5, then 0.5 s of
                               silence, whose samples are stored as audio_synthetic, F32 [24000])
  logmel_golden.json           how they were made; differences to HF's other log-mel paths (and to openai-whisper
                               when installed, and to its algorithm with openai's mel filters) for information
  whisper-tiny-mel80-f32/      tiny random WhisperForConditionalGeneration: 80 mel bins, vocab 51,865 (the
                               multilingual tokenizer, 99 languages), d_model 16, 2+2 layers, F32 storage
  whisper-v3-mel128-f16/       large-v3-like: 128 mel bins, vocab 51,866 (100 languages), d_model 32, F16 storage
    each model folder          save_pretrained output (config.json, generation_config.json, model.safetensors),
                               the HF tokenizer built offline from the ranks (see whisper_tokenizers.py) and the
                               feature extractor (preprocessor_config.json), plus
      golden.safetensors       encoder_last_hidden_state [1,1500,d], greedy_raw_logits [<=3,vocab]: the decoder's
                               raw last-position logits at the first 3 steps of the manual greedy loop, and (128
                               bins only; the 80-bin ones are logmel_jfk) input_features [1,mels,3000] of jfk.wav
      golden.json              every decoding with its exact kwargs: greedy_raw (a manual argmax loop over the raw
                               logits, no logits processor, full recompute each step, with the top-1/top-2 margin
                               of every step), and model.generate runs: greedy (the generation config's
                               suppress_tokens and begin_suppress_tokens applied), greedy_no_suppress (both set
                               to None: must equal greedy_raw), beam4 (num_beams=4), timestamps
                               (return_timestamps=True, one generate call), longform (jfk.wav 3 times, 33 s: HF's
                               sequential windows with timestamp seeking, its segments); plus detect_language

Pitfalls handled (see ../shared/REFERENCE_NOTES.md): the tokenizer is built from merges derived from the ranks and
checked against tiktoken before use and after reload; weights are re-initialised (REINIT_SCALES, the first whose
greedy decoding has >= 8 distinct tokens with clear argmax margins: HF's default init makes every step repeat
its input token; convolutions with gain 3 so that the encoder output depends on the audio more than on its
positional embedding, which keeps Whisper's sinusoids); generate() applies the
generation config's suppression, so the raw greedy golden comes from a manual loop and from generate() with
suppression off; a random model rarely emits <|endoftext|>, so every decoding is bounded by max_new_tokens=32.
"""
import argparse
import copy
import hashlib
import importlib.metadata
import inspect
import json
import os
import sys
import tempfile
import wave

import numpy as np
import torch

import transformers
from safetensors.torch import save_file
from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import whisper_tokenizers as wt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_RATE = 16000
MAX_NEW_TOKENS = 32
LOGIT_STEPS = 3
# Re-initialisation scales tried in order (token embedding std, decoder position std, layer std): the first
# whose raw greedy decoding is informative (>= MIN_DISTINCT distinct tokens, top-1/top-2 margin >= MIN_MARGIN at
# every step) is kept. A tied embedding much larger than the layers' contributions makes every step repeat its
# input token (logits = h . E with h ~ e_token), which tests nothing.
REINIT_SCALES = [(0.5, 0.08, 0.08), (0.2, 0.5, 0.2), (0.1, 0.5, 0.3), (0.1, 1.0, 0.3), (0.05, 1.0, 0.5),
                 (0.2, 1.0, 0.5), (0.05, 0.5, 0.8)]
MIN_DISTINCT = 8
MIN_MARGIN = 2e-3
# Decoding parameters recorded with every generate() golden (kwargs over the generation config's values).
EFFECTIVE_KEYS = ("do_sample", "num_beams", "max_new_tokens", "max_length", "length_penalty", "early_stopping",
                  "num_return_sequences", "temperature", "repetition_penalty", "no_repeat_ngram_size",
                  "suppress_tokens", "begin_suppress_tokens", "max_initial_timestamp_index", "return_timestamps",
                  "decoder_start_token_id", "eos_token_id", "pad_token_id", "no_timestamps_token_id")

MODELS = {
    # name: tokenizer languages, model shape, storage dtype. vocab x d_model dominates the size: <= ~1.7 MB each.
    "whisper-tiny-mel80-f32": dict(
        num_languages=99, dtype=torch.float32,
        shape=dict(num_mel_bins=80, d_model=8, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                   decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=32)),
    "whisper-v3-mel128-f16": dict(
        num_languages=100, dtype=torch.float16,
        shape=dict(num_mel_bins=128, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=48)),
}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ------------------------------------------------------------------------------------------------- audio
def read_wav_s16_mono(path):
    """Samples as float32 in [-1, 1): int16 / 32768.0, as openai-whisper's load_audio."""
    with wave.open(path, "rb") as w:
        fmt = (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getcomptype())
        if fmt != (1, 2, SAMPLE_RATE, "NONE"):
            sys.exit(f"{path}: expected 16 kHz s16 mono PCM, got channels/width/rate/compression {fmt}")
        frames = w.readframes(w.getnframes())
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0


def synthetic_audio():
    """x[n] = 0.5 * sin(2*pi*440*n/16000) in float64, cast to float32, n = 0..15999; then 8000 zeros."""
    n = np.arange(16000, dtype=np.float64)
    tone = (0.5 * np.sin(2.0 * np.pi * 440.0 * n / 16000.0)).astype(np.float32)
    return np.concatenate([tone, np.zeros(8000, dtype=np.float32)])


def feature_extractor(n_mels):
    return WhisperFeatureExtractor(feature_size=n_mels, sampling_rate=SAMPLE_RATE, hop_length=160, chunk_length=30,
                                   n_fft=400, padding_value=0.0, return_attention_mask=False)


def log_mel(fe, audio):
    """HF's default path: fe(audio) -> [n_mels, 3000] float32 (the audio zero-padded to 30 s)."""
    feats = fe(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
    assert feats.shape == (1, fe.feature_size, 3000), feats.shape
    return torch.from_numpy(np.ascontiguousarray(feats[0], dtype=np.float32))


def other_log_mels(fe, audio, openai_filters):
    """Other ways to the same log-mel, for information only: {name: [n_mels, 3000] tensor or error string}."""
    padded = np.zeros((1, fe.n_samples), dtype=np.float32)
    padded[0, :len(audio)] = audio[:fe.n_samples]
    out = {}
    for name in ("_torch_extract_fbank_features", "_np_extract_fbank_features"):
        if hasattr(fe, name):
            try:
                feats = np.asarray(getattr(fe, name)(padded, "cpu"))[0]
                out[f"hf{name}"] = torch.as_tensor(feats, dtype=torch.float32)
            except Exception as e:  # noqa: BLE001  (private API: information only)
                out[f"hf{name}"] = f"{type(e).__name__}: {e}"
    try:
        import whisper
        out["openai_whisper"] = whisper.log_mel_spectrogram(torch.from_numpy(audio), fe.feature_size,
                                                            padding=fe.n_samples)[:, :3000].float()
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001
        out["openai_whisper"] = f"{type(e).__name__}: {e}"
    if openai_filters is not None:
        # openai-whisper's log_mel_spectrogram (whisper/audio.py) with its own mel_filters.npz.
        x = torch.nn.functional.pad(torch.from_numpy(audio), (0, fe.n_samples))
        stft = torch.stft(x, 400, 160, window=torch.hann_window(400), return_complex=True)
        mel = openai_filters[fe.feature_size] @ (stft[..., :-1].abs() ** 2)
        spec = torch.clamp(mel, min=1e-10).log10()
        spec = (torch.maximum(spec, spec.max() - 8.0) + 4.0) / 4.0
        out["openai_algorithm_with_npz_filters"] = spec[:, :3000]
    return out


def load_openai_mel_filters(path):
    """{80: [80,201], 128: [128,201]} float32 from openai's mel_filters (.npz or converted .safetensors), or None."""
    if not path or not os.path.exists(path):
        print(f"no openai mel filters at {path}: logmel_golden.json will not compare with openai's algorithm")
        return None
    if path.endswith(".npz"):
        with np.load(path) as f:
            return {80: torch.from_numpy(f["mel_80"]), 128: torch.from_numpy(f["mel_128"])}
    from safetensors.torch import load_file
    t = load_file(path)
    return {80: t["mel_80"].to(torch.float32), 128: t["mel_128"].to(torch.float32)}


def compare(reference, others):
    return {name: (v if isinstance(v, str) else float((v - reference).abs().max())) for name, v in others.items()}


def write_logmel_goldens(jfk, jfk_path, openai_filters, out):
    fe = feature_extractor(80)
    synth = synthetic_audio()
    tensors = {"logmel_jfk": log_mel(fe, jfk), "logmel_synthetic": log_mel(fe, synth),
               "audio_synthetic": torch.from_numpy(synth)}
    info = {
        "feature_extractor": "WhisperFeatureExtractor default __call__(audio, sampling_rate=16000, "
                             "return_tensors='np')",
        "feature_extractor_config": {k: v for k, v in fe.to_dict().items() if k != "mel_filters"},
        "jfk": {"file": "tests/fixtures/audio/jfk.wav", "sha256": sha256(jfk_path), "samples": len(jfk),
                "conversion": "int16 little-endian / 32768.0, float32"},
        "synthetic": "x[n] = float32(0.5 * sin(2.0 * pi * 440.0 * n / 16000.0)) computed in float64, n = 0..15999, "
                     "then 8000 zeros (audio_synthetic)",
        "max_abs_diff_to_other_paths": {
            "jfk": compare(tensors["logmel_jfk"], other_log_mels(fe, jfk, openai_filters)),
            "synthetic": compare(tensors["logmel_synthetic"], other_log_mels(fe, synth, openai_filters)),
        },
        "transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
    }
    if openai_filters is not None and hasattr(fe, "mel_filters"):
        hf_filters = torch.as_tensor(np.asarray(fe.mel_filters), dtype=torch.float32)
        hf_filters = hf_filters.T if hf_filters.shape[0] == 201 else hf_filters  # HF stores [201, n_mels]
        info["mel_filters_max_abs_diff_hf_vs_openai_npz"] = float((hf_filters - openai_filters[80]).abs().max())
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "logmel_golden.safetensors"),
              metadata={"transformers": transformers.__version__})
    with open(os.path.join(out, "logmel_golden.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1, default=str)
    print(f"logmel: {json.dumps(info['max_abs_diff_to_other_paths'])}")


# ------------------------------------------------------------------------------------------------ models
def sinusoids(length, channels, max_timescale=10000):
    """whisper/model.py sinusoids: the encoder's fixed positional embedding (real checkpoints store it)."""
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


def reinit(model, seed, scales):
    embed_std, position_std, layer_std = scales
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "model.encoder.embed_positions.weight":
                p.copy_(sinusoids(*p.shape))
            elif "layer_norm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(embed_std * torch.randn(p.shape, generator=g))
            elif name == "model.decoder.embed_positions.weight":
                p.copy_(position_std * torch.randn(p.shape, generator=g))
            elif ".conv" in name and name.endswith("weight"):
                fan_in = p.shape[1] * p.shape[2]
                p.copy_(3.0 / fan_in ** 0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(layer_std * torch.randn(p.shape, generator=g))
        embed = model.model.decoder.embed_tokens.weight
        if not torch.equal(model.proj_out.weight, embed):  # tied in every real checkpoint
            model.proj_out.weight.copy_(embed)


def choose_reinit(model, seed, dtype, fe, jfk, prompt, eot):
    """Re-initialises `model` with the first REINIT_SCALES entry whose raw greedy decoding of jfk.wav (weights
    rounded to the storage dtype, as saved) is informative; returns the scales."""
    feats = log_mel(fe, jfk)[None]
    for scales in REINIT_SCALES:
        reinit(model, seed, scales)
        probe = copy.deepcopy(model).to(dtype).to(torch.float32).eval()
        with torch.no_grad():
            hidden = probe.get_encoder()(input_features=feats).last_hidden_state
        tokens, _, _, margins = greedy_raw(probe, hidden, prompt, eot)
        distinct, margin = len(set(tokens)), min(margins)
        print(f"  reinit {scales}: {distinct} distinct of {len(tokens)} tokens, min margin {margin:.4f}")
        if distinct >= MIN_DISTINCT and margin >= MIN_MARGIN:
            return scales
    sys.exit(f"no re-initialisation in {REINIT_SCALES} gives an informative greedy decoding")


def longform(ref, fe, jfk, eot):
    """HF's long-form generate (sequential 30 s windows, timestamp seeking) on jfk.wav three times (33 s)."""
    audio = np.concatenate([jfk, jfk, jfk])
    kwargs = dict(language="en", task="transcribe", return_timestamps=True, condition_on_prev_tokens=False,
                  temperature=0.0, logprob_threshold=None, compression_ratio_threshold=None,
                  no_speech_threshold=None, max_new_tokens=MAX_NEW_TOKENS, return_segments=True)
    record = {"audio": "tests/fixtures/audio/jfk.wav concatenated 3 times (float32 samples)",
              "samples": len(audio),
              "feature_extractor_call": "fe(audio, sampling_rate=16000, truncation=False, padding='longest', "
                                        "return_attention_mask=True, return_tensors='pt')",
              "kwargs": kwargs}
    try:
        inputs = fe(audio, sampling_rate=SAMPLE_RATE, truncation=False, padding="longest",
                    return_attention_mask=True, return_tensors="pt")
        record["input_frames"] = int(inputs["input_features"].shape[-1])
        with torch.no_grad():
            out = ref.generate(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"],
                               **kwargs)
        seq = out["sequences"] if isinstance(out, dict) else getattr(out, "sequences", out)
        record["sequences"] = [int(t) for t in seq[0]]
        segments = out["segments"][0] if isinstance(out, dict) and "segments" in out else []
        record["segments"] = [{"start": float(s["start"]), "end": float(s["end"]),
                               "tokens": [int(t) for t in s["tokens"]]} for s in segments]
    except Exception as e:  # noqa: BLE001  (the other goldens are still worth writing)
        record["error"] = f"{type(e).__name__}: {e}"
        print(f"  long-form generate failed: {record['error']}")
    return record


def generation_fields(enc, num_languages):
    """generation_config.json as HF's Whisper checkpoints have it, with ids from the tiktoken encoding."""
    sp = enc._special_tokens
    eot = sp["<|endoftext|>"]
    space = enc.encode(" ")
    assert space == [220], space
    return dict(
        decoder_start_token_id=sp["<|startoftranscript|>"], bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
        max_length=448, begin_suppress_tokens=[space[0], eot], suppress_tokens=wt.suppress_tokens(enc),
        forced_decoder_ids=[[1, None], [2, sp["<|transcribe|>"]]],
        is_multilingual=True,
        lang_to_id={f"<|{code}|>": sp[f"<|{code}|>"] for code in list(wt.LANGUAGES)[:num_languages]},
        task_to_id={"transcribe": sp["<|transcribe|>"], "translate": sp["<|translate|>"]},
        no_timestamps_token_id=sp["<|notimestamps|>"], prev_sot_token_id=sp["<|startofprev|>"],
        max_initial_timestamp_index=50, return_timestamps=False, alignment_heads=[[1, 0], [1, 1]],
    )


def make_generation_config(fields):
    """GenerationConfig with every field; forced_decoder_ids is dropped if this transformers refuses it."""
    try:
        gc = GenerationConfig(**fields)
        with tempfile.TemporaryDirectory() as d:
            gc.save_pretrained(d)
        return gc, None
    except Exception as e:  # noqa: BLE001
        note = f"forced_decoder_ids dropped: {type(e).__name__}: {e}"
        print(f"  {note}")
        return GenerationConfig(**{k: v for k, v in fields.items() if k != "forced_decoder_ids"}), note


def save_tokenizer_and_processor(tok, fe, enc, d):
    try:
        transformers.WhisperProcessor(feature_extractor=fe, tokenizer=tok).save_pretrained(d)
        how = "WhisperProcessor.save_pretrained"
    except Exception as e:  # noqa: BLE001
        print(f"  WhisperProcessor refused ({type(e).__name__}: {e}); saving tokenizer and feature extractor apart")
        tok.save_pretrained(d)
        fe.save_pretrained(d)
        how = "tokenizer.save_pretrained + feature_extractor.save_pretrained"
    reloaded = transformers.AutoTokenizer.from_pretrained(d)
    bad = wt.hf_mismatches(reloaded, enc)
    if bad:
        sys.exit(f"{d}: the saved tokenizer does not reload faithfully: {bad[:5]}")
    return how, type(reloaded).__name__


def normalize(sequence, prompt, eot):
    """(tokens after the prompt up to <|endoftext|>, prompt_returned, stopped_at_eos) of one returned sequence."""
    seq = [int(t) for t in sequence]
    prompt_returned = seq[:len(prompt)] == prompt
    body = seq[len(prompt):] if prompt_returned else seq
    stopped = eot in body
    return (body[:body.index(eot)] if stopped else body), prompt_returned, stopped


def greedy_raw(model, hidden, prompt, eot):
    """Argmax of the raw logits, no logits processor, the whole decoder re-run at every step (no KV cache)."""
    ids, kept, margins = list(prompt), [], []
    encoder_outputs = BaseModelOutput(last_hidden_state=hidden)
    with torch.no_grad():
        for step in range(MAX_NEW_TOKENS):
            out = model(encoder_outputs=encoder_outputs, decoder_input_ids=torch.tensor([ids]), use_cache=False)
            logits = out.logits[0, -1].to(torch.float32)
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            if step < LOGIT_STEPS:
                kept.append(logits.clone())
            ids.append(int(torch.argmax(logits)))
            if ids[-1] == eot:
                break
    tokens, _, stopped = normalize(ids, prompt, eot)
    return tokens, stopped, torch.stack(kept), margins


def run_generate(model, feats, gen_config, prompt, eot, kwargs, overrides):
    """One model.generate call; the plain return value (a tensor), normalised. Errors are recorded, not raised."""
    gc = copy.deepcopy(gen_config)
    for k, v in overrides.items():
        setattr(gc, k, v)
    record = {"kwargs": kwargs, "generation_config_overrides": overrides, "expected_prompt": prompt,
              "effective": {k: kwargs.get(k, getattr(gc, k, None)) for k in EFFECTIVE_KEYS}}
    try:
        with torch.no_grad():
            out = model.generate(input_features=feats, generation_config=gc, **kwargs)
        seq = out["sequences"] if isinstance(out, dict) else getattr(out, "sequences", out)
        seq = [int(t) for t in seq[0]]
        tokens, prompt_returned, stopped = normalize(seq, prompt, eot)
        record.update(returned=seq, tokens=tokens, prompt_returned=prompt_returned, stopped_at_eos=stopped,
                      ended_before_max_new_tokens=len(tokens) < MAX_NEW_TOKENS)
    except Exception as e:  # noqa: BLE001  (the other goldens are still worth writing)
        record["error"] = f"{type(e).__name__}: {e}"
        print(f"  generate {kwargs} failed: {record['error']}")
    return record


def write_model(name, spec, jfk, jfk_path, tokenizer_dir, out, seed, staging):
    num_languages = spec["num_languages"]
    ranks_path = wt.rank_file(tokenizer_dir, "multilingual")
    enc = wt.tiktoken_encoding(ranks_path, num_languages)
    sp = enc._special_tokens
    eot, sot = sp["<|endoftext|>"], sp["<|startoftranscript|>"]
    tok, tok_build = wt.build_hf_tokenizer(ranks_path, num_languages, enc, os.path.join(staging, name))
    fe = feature_extractor(spec["shape"]["num_mel_bins"])

    config = WhisperConfig(vocab_size=enc.n_vocab, max_source_positions=1500, max_target_positions=448,
                           activation_function="gelu", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                           scale_embedding=False, decoder_start_token_id=sot, bos_token_id=eot, eos_token_id=eot,
                           pad_token_id=eot, begin_suppress_tokens=None, suppress_tokens=None,
                           tie_word_embeddings=True, **spec["shape"])
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    scales = choose_reinit(model, seed, spec["dtype"], feature_extractor(spec["shape"]["num_mel_bins"]), jfk,
                           [sot, sp["<|en|>"], sp["<|transcribe|>"], sp["<|notimestamps|>"]], eot)
    gen_config, gen_note = make_generation_config(generation_fields(enc, num_languages))
    model.generation_config = gen_config
    d = os.path.join(out, name)
    model.to(spec["dtype"])
    model.save_pretrained(d)
    saved_with, tok_class = save_tokenizer_and_processor(tok, fe, enc, d)
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    if size > 4 * 1024 * 1024:
        print(f"  WARNING {name}: model.safetensors is {size} bytes (tied proj_out saved twice?)")

    # Goldens from the files as saved, computed in float32 with the plain (eager) attention.
    ref = WhisperForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    assert torch.equal(ref.proj_out.weight, ref.model.decoder.embed_tokens.weight), "proj_out not tied after reload"
    ref_gc = ref.generation_config
    assert ref_gc.lang_to_id == gen_config.lang_to_id and ref_gc.suppress_tokens == gen_config.suppress_tokens
    fe_reloaded = WhisperFeatureExtractor.from_pretrained(d)
    feats = log_mel(fe_reloaded, jfk)[None]
    assert torch.equal(feats[0], log_mel(fe, jfk)), "reloaded feature extractor differs"
    with torch.no_grad():
        hidden = ref.get_encoder()(input_features=feats).last_hidden_state.to(torch.float32)

    lang, transcribe, notimestamps = sp["<|en|>"], sp["<|transcribe|>"], sp["<|notimestamps|>"]
    prompt = [sot, lang, transcribe, notimestamps]
    prompt_ts = [sot, lang, transcribe]
    raw_tokens, raw_stopped, raw_logits, margins = greedy_raw(ref, hidden, prompt, eot)
    common = dict(language="en", task="transcribe", do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    runs = {
        "greedy": (dict(common, num_beams=1, return_timestamps=False), {}, prompt),
        "greedy_no_suppress": (dict(common, num_beams=1, return_timestamps=False),
                               {"suppress_tokens": None, "begin_suppress_tokens": None}, prompt),
        "beam4": (dict(common, num_beams=4, return_timestamps=False), {}, prompt),
    }
    if "force_unique_generate_call" in inspect.signature(ref.generate).parameters:
        # One generate call: the raw ids of a single 30 s window (not HF's long-form re-segmentation).
        runs["timestamps"] = (dict(common, num_beams=1, return_timestamps=True, force_unique_generate_call=True),
                              {}, prompt_ts)
    generate = {k: run_generate(ref, feats, ref_gc, p, eot, kw, ov) for k, (kw, ov, p) in runs.items()}
    if "timestamps" not in generate:
        generate["timestamps"] = {"error": "generate() has no force_unique_generate_call: skipped"}
    no_suppress = generate["greedy_no_suppress"].get("tokens")
    if no_suppress != raw_tokens:
        print(f"  note: generate without suppression {no_suppress} != manual greedy {raw_tokens}")
    try:
        with torch.no_grad():
            detected = [int(t) for t in ref.detect_language(input_features=feats).flatten()]
    except Exception as e:  # noqa: BLE001
        detected = f"{type(e).__name__}: {e}"

    generate["longform"] = longform(ref, fe_reloaded, jfk, eot)
    golden = {"encoder_last_hidden_state": hidden, "greedy_raw_logits": raw_logits}
    if spec["shape"]["num_mel_bins"] != 80:  # the 80-bin features are logmel_golden.safetensors' logmel_jfk
        golden["input_features"] = feats
    save_file({k: v.contiguous() for k, v in golden.items()}, os.path.join(d, "golden.safetensors"))
    info = {
        "audio": {"file": "tests/fixtures/audio/jfk.wav", "sha256": sha256(jfk_path)},
        "input_features": "WhisperFeatureExtractor.from_pretrained(this folder)(audio, sampling_rate=16000)",
        "storage_dtype": str(spec["dtype"]), "compute_dtype": "float32", "attn_implementation": "eager",
        "device": "cpu", "seed": seed, "model_shape": spec["shape"], "vocab_size": enc.n_vocab,
        "reinit_scales": {"token_embedding_std": scales[0], "decoder_position_std": scales[1],
                          "layer_std": scales[2]},
        "num_languages": num_languages,
        "reinit": "N(0, layer_std) weights and biases; token embeddings N(0, token_embedding_std) (tied to "
                  "proj_out); decoder positions N(0, decoder_position_std); conv weights N(0, 3/sqrt(fan_in)); "
                  "layer norms 1 + N(0, 0.1) / N(0, 0.1); encoder positions = whisper sinusoids",
        "tokenizer": {"built": tok_build, "saved_with": saved_with, "reloaded_class": tok_class},
        "generation_config_note": gen_note,
        "special": {k: sp[k] for k in ("<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>",
                                        "<|transcribe|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
                                        "<|0.00|>")},
        "greedy_raw": {
            "description": "manual loop: decoder_input_ids = prompt + generated so far, logits of the last "
                           "position from model(encoder_outputs=encoder_last_hidden_state, use_cache=False), "
                           "argmax (first index on ties), no logits processor; stops after <|endoftext|> or "
                           f"{MAX_NEW_TOKENS} tokens. greedy_raw_logits holds the first {LOGIT_STEPS} steps' logits.",
            "prompt": prompt, "tokens": raw_tokens, "stopped_at_eos": raw_stopped, "top1_top2_margin": margins,
        },
        "generate": generate,
        "generate_notes": "model.generate(input_features, generation_config=<this folder's generation_config.json "
                          "with generation_config_overrides>, **kwargs); 'returned' is its plain return value, "
                          "'tokens' what follows the prompt up to <|endoftext|> (HF may or may not return the "
                          "prompt and the <|endoftext|>: see prompt_returned / stopped_at_eos).",
        "detect_language": detected,
        "transformers": transformers.__version__, "torch": torch.__version__,
        "tokenizers": importlib.metadata.version("tokenizers"), "tiktoken": importlib.metadata.version("tiktoken"),
    }
    with open(os.path.join(d, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1, default=str)
    errors = [k for k, v in generate.items() if "error" in v]
    if "input_features" not in golden and not torch.equal(feats[0], log_mel(feature_extractor(80), jfk)):
        sys.exit("the 80-bin input features differ from logmel_jfk")
    print(f"model {name}: {size // 1024} kB weights, greedy_raw {raw_tokens[:8]}..., min margin "
          f"{min(margins):.4f}, generate errors {errors}, files {sorted(os.listdir(d))}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (copy its contents into tests/fixtures/)")
    ap.add_argument("--jfk", default=os.path.join(REPO, "tests", "fixtures", "audio", "jfk.wav"))
    ap.add_argument("--tokenizer-dir", default=os.path.join(REPO, "assets", "whisper_tokenizer"),
                    help="folder holding multilingual.tiktoken")
    ap.add_argument("--openai-mel-filters",
                    default=os.path.join(REPO, "tests", "fixtures", "whisper", "mel_filters.safetensors"),
                    help="openai-whisper's mel filters (mel_80, mel_128), .safetensors or .npz, optional: the "
                         "log-mel differences to openai's algorithm go into logmel_golden.json")
    args = ap.parse_args()
    torch.set_num_threads(4)
    if not os.path.exists(args.jfk):
        sys.exit(f"missing input {args.jfk}")
    wt.rank_file(args.tokenizer_dir, "multilingual")
    out = os.path.join(os.path.abspath(args.out), "whisper")
    os.makedirs(out, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")

    openai_filters = load_openai_mel_filters(args.openai_mel_filters)
    jfk = read_wav_s16_mono(args.jfk)
    write_logmel_goldens(jfk, args.jfk, openai_filters, out)
    errors = {}
    with tempfile.TemporaryDirectory() as staging:  # hand-written tokenizer folders, alive until saved
        for i, (name, spec) in enumerate(MODELS.items()):
            errors[name] = write_model(name, spec, jfk, args.jfk, args.tokenizer_dir, out, 4321 + i, staging)
    if any(errors.values()):
        sys.exit(f"some generate() goldens failed (recorded as 'error' in golden.json): {errors}")


if __name__ == "__main__":
    main()
