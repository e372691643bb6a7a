#!/usr/bin/env python3
"""HF transformers' WhisperForConditionalGeneration (fp16) on the GPU: the baseline for bench/whisper_gpu_bench
(same random weights, same shapes, same GPU, same run; bench/run_whisper_gpu_bench.sh drives both).

    python3 bench/hf_whisper_gpu.py --arch tiny|large-v3 --save DIR [--windows 1,16] [--batches 1,16]
                                    [--new-tokens 128] [--iters 3]
Writes the random-weight fp16 checkpoint to DIR (save_pretrained: config.json + model.safetensors), which the
mmserve side loads, then prints one JSON object on stdout (progress on stderr).

What is timed (CUDA events, median of --iters after one warm-up):
  encoder   model.model.encoder(input_features) for W windows of 30 s (3000 mel frames) already on the GPU;
  decoding  GenerationMixin.generate over precomputed encoder outputs (so the encoder is not in it) with the
            4-token prompt <|startoftranscript|><|en|><|transcribe|><|notimestamps|>, greedy, exactly
            --new-tokens new tokens (min_new_tokens = max_new_tokens, no suppression, no logits processors),
            B rows; tokens/s = B * new_tokens / time.
Random weights: HF's own initialisation (std 0.02) under torch.manual_seed(0).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import GenerationConfig, GenerationMixin, WhisperConfig, WhisperForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

# The real checkpoints' architectures (openai/whisper-tiny, openai/whisper-large-v3 config.json).
ARCHS = {
    "tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                 decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
                 vocab_size=51865),
    "large-v3": dict(d_model=1280, encoder_layers=32, decoder_layers=32, encoder_attention_heads=20,
                     decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120, num_mel_bins=128,
                     vocab_size=51866),
}
SOT, EN, TRANSCRIBE, NO_TIMESTAMPS, EOT = 50258, 50259, 50359, 50363, 50257
PROMPT = [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def timed(fn, iters):
    """Median milliseconds of fn() over iters runs after one warm-up (CUDA events around each call)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", choices=sorted(ARCHS), required=True)
    p.add_argument("--save", required=True)
    p.add_argument("--windows", default="1,16")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--iters", type=int, default=3)
    args = p.parse_args()
    windows = [int(x) for x in args.windows.split(",")]
    batches = [int(x) for x in args.batches.split(",")]

    t0 = time.time()
    config = WhisperConfig(max_source_positions=1500, max_target_positions=448, activation_function="gelu",
                           scale_embedding=False, decoder_start_token_id=SOT, bos_token_id=EOT, eos_token_id=EOT,
                           pad_token_id=EOT, begin_suppress_tokens=None, suppress_tokens=None,
                           tie_word_embeddings=True, **ARCHS[args.arch])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = WhisperForConditionalGeneration(config)
    model = model.half().eval()
    model.save_pretrained(args.save)
    log(f"{args.arch}: random model built and saved in {time.time() - t0:.1f} s")

    result = {"side": "hf", "arch": args.arch, "dtype": "fp16", "torch": torch.__version__,
              "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(0),
              "attn_implementation": model.config._attn_implementation, "new_tokens": args.new_tokens,
              "prompt": PROMPT, "encoder_ms": {}, "decode": {}}
    mels = config.num_mel_bins
    gen = torch.Generator(device="cuda").manual_seed(1)
    with torch.inference_mode():
        for w in windows:
            feats = torch.randn(w, mels, 3000, device="cuda", dtype=torch.float16, generator=gen)
            ms, _ = timed(lambda: model.model.encoder(feats), max(args.iters, 5))
            result["encoder_ms"][str(w)] = ms
            log(f"{args.arch}: encoder {w} windows {ms:.2f} ms")
        for b in batches:
            feats = torch.randn(b, mels, 3000, device="cuda", dtype=torch.float16, generator=gen)
            enc = BaseModelOutput(last_hidden_state=model.model.encoder(feats).last_hidden_state)
            prompt = torch.tensor([PROMPT] * b, device="cuda")

            gc = GenerationConfig(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                                  num_beams=1, eos_token_id=EOT, pad_token_id=EOT, decoder_start_token_id=SOT,
                                  use_cache=True)
            model.generation_config = gc

            def decode():
                # GenerationMixin.generate: the plain encoder-decoder loop (WhisperGenerationMixin.generate adds
                # the language/task/timestamp handling, which these forced 128-token runs do not use; if this
                # transformers refuses the direct call, Whisper's own generate runs with the same config).
                try:
                    return GenerationMixin.generate(model, encoder_outputs=enc, decoder_input_ids=prompt,
                                                    generation_config=gc)
                except Exception as e:  # noqa: BLE001 - recorded, then the fallback
                    result.setdefault("generate_fallback", repr(e)[:300])
                    return model.generate(encoder_outputs=enc, decoder_input_ids=prompt, generation_config=gc)

            ms, out = timed(decode, args.iters)
            new = args.new_tokens
            if out.shape[1] - len(PROMPT) != new:  # Whisper's generate (the fallback) may strip the prompt
                result.setdefault("output_shapes", {})[str(b)] = list(out.shape)
            result["decode"][str(b)] = {"ms": ms, "tokens_per_s": b * new / (ms / 1000.0),
                                        "ms_per_step": ms / new}
            log(f"{args.arch}: decode batch {b}: {ms:.1f} ms, {b * new / (ms / 1000.0):.1f} tokens/s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
