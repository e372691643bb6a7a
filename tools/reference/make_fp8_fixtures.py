#!/usr/bin/env python3
"""Builds mmserve's FP8 conformance fixture (issue 17): a compressed-tensors FP8 checkpoint of the committed tiny Llama
(per-tensor E4M3 weights, static per-tensor input scales) and HF transformers' goldens for it.

Run where torch (>= 2.1: float8_e4m3fn), transformers (>= 5) and safetensors are installed (the GPU host; CPU float32,
no network, no llm-compressor needed):

    python3 tools/reference/make_fp8_fixtures.py --fixtures tests/fixtures --out /tmp/fx
    # then: cp -r /tmp/fx/quant/fp8-static tests/fixtures/quant/   (rerunnable: the output is deterministic)

The base is tests/fixtures/llama/llama-gqa-f32 as committed (AutoModelForCausalLM, float32, eager); its greedy ids are
checked against its golden.json first. The seven linears of every layer (q/k/v/o_proj, gate/up/down_proj) become FP8;
embeddings, norms and lm_head stay f32 (ignore: ["lm_head"], as llm-compressor's FP8 recipes). As llm-compressor's
FP8 preset (compressed-tensors' quant_scheme.py: weights float 8-bit strategy tensor, input_activations float 8-bit
strategy tensor, dynamic false; the minmax observer: scale = max(|min|, |max|) / 448) and AutoFP8's quantize.py
(per_tensor_quantize, static_per_tensor_quantize: the clamp to +-448 before .to(float8_e4m3fn), which does not
saturate by itself):
  weight_scale = max(amax(|W|), 1e-12) / 448              (float32, shape [1])
  weight       = (W / weight_scale).clamp(-448, 448).to(float8_e4m3fn)
  input_scale  = max(amax(|x|), 1e-12) / 448              (float32, shape [1]; amax over the linear's inputs in the
                                                           base model's forward of the fixture's prompt)
Written under quant/fp8-static/:
  config.json          the base's config plus quantization_config (compressed-tensors, format float-quantized)
  model.safetensors    <module>.weight F8_E4M3 [out, in], <module>.weight_scale F32 [1], <module>.input_scale F32 [1],
                       the base's other tensors (F32)
  deq.safetensors      <module>.weight F32: the codes decoded by an independent bit-level E4M3 decoder (numpy, from the
                       OCP layout), times weight_scale; checked equal to torch's float8 -> float32 conversion
  golden.safetensors   from LlamaForCausalLM holding the base's tensors with the linears set to deq.safetensors and a
                       forward pre-hook on each of those nn.Linear that fake-quantises its input as an FP8 engine does:
                       x -> (x / input_scale).clamp(-448, 448).to(float8_e4m3fn).to(float32) * input_scale:
                         prompt_logits [P, V], step_logits [N, V] (cached decode, make_llama_fixtures.run),
                         greedy_ids I64 [N]
  golden.json          base "../../llama/llama-gqa-f32", the quantization_config, prompt ids, greedy ids, the base
                       model's greedy ids and the agreement, the largest prompt-logit change against the base, the
                       minimum top-1 margin, the input scales, versions
Should the FP8 model's greedy run have a top-1 margin below MIN_MARGIN (an ambiguous golden), the first of a few seeded
prompts that has one is used for the goldens instead (the input scales stay those of the fixture's prompt).
"""
import argparse
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_fixtures import NEW_TOKENS, PROMPT_LEN, VOCAB, margin, run  # noqa: E402

BASE = "llama/llama-gqa-f32"
NAME = "fp8-static"
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]
FP8_MAX = 448.0
MIN_MARGIN = 2e-3

ARGS = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False, "group_size": None,
        "block_structure": None, "actorder": None, "observer": "minmax", "observer_kwargs": {}}
QUANT_CONFIG = {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": ARGS, "input_activations": ARGS,
                                              "output_activations": None, "format": "float-quantized"}},
                "ignore": ["lm_head"], "kv_cache_scheme": None, "global_compression_ratio": None,
                "sparsity_config": {}}


def scale_for(amax):
    return (torch.as_tensor(amax, dtype=torch.float32).clamp(min=1e-12) / FP8_MAX).reshape(1)


def to_fp8(x, scale):
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def decode_e4m3(codes):
    """E4M3 bytes -> float32 by bit arithmetic (sign, 4 exponent bits of bias 7, 3 mantissa bits; field 0 subnormal;
    S.1111.111 NaN), independent of torch's conversion."""
    b = codes.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    field, mant = (b >> 3) & 0xF, b & 0x7
    normal = np.ldexp(1.0 + mant / 8.0, field - 7)
    sub = np.ldexp(mant / 8.0, -6)
    out = sign * np.where(field == 0, sub, normal)
    out[(b & 0x7F) == 0x7F] = np.nan
    return out.astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True, help="tests/fixtures (holds %s)" % BASE)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import safetensors
    import transformers
    from safetensors.torch import load_file, save_file
    torch.set_grad_enabled(False)
    base_dir = os.path.join(args.fixtures, BASE)
    base_meta = json.load(open(os.path.join(base_dir, "golden.json")))

    def load_base():
        return transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32,
                                                                 attn_implementation="eager").eval()

    base = load_base()
    base_prompt = base_meta["prompt_ids"]
    _, _, base_greedy = run(base, base_prompt)
    assert base_greedy == base_meta["greedy_ids"], ("the base fixture changed", base_greedy, base_meta["greedy_ids"])
    base_tensors = load_file(os.path.join(base_dir, "model.safetensors"))
    layers = base.config.num_hidden_layers
    prefixes = [f"model.layers.{layer}.{lin}" for layer in range(layers) for lin in LINEARS]

    # Input amax of each linear over the base model's forward of the fixture's prompt.
    amax, hooks = {}, []
    for p in prefixes:
        def record(module, inputs, p=p):
            amax[p] = max(amax.get(p, 0.0), float(inputs[0].abs().max()))
        hooks.append(base.get_submodule(p).register_forward_pre_hook(record))
    base(torch.tensor([base_prompt]))
    for h in hooks:
        h.remove()

    d = os.path.join(args.out, "quant", NAME)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    stored, deq, input_scales = {}, {}, {}
    for p in prefixes:
        w = base_tensors[p + ".weight"].float()
        ws = scale_for(w.abs().max())
        q = to_fp8(w, ws)
        mine = torch.from_numpy(decode_e4m3(q.view(torch.uint8).numpy())) * ws
        assert torch.equal(mine, q.to(torch.float32) * ws), (p, "the bit-level decoder disagrees with torch")
        stored[p + ".weight"] = q.contiguous()
        stored[p + ".weight_scale"] = ws
        input_scales[p] = scale_for(amax[p])
        stored[p + ".input_scale"] = input_scales[p]
        deq[p + ".weight"] = mine.contiguous()
    for key, t in base_tensors.items():
        if key not in deq:
            stored[key] = t.contiguous()
    save_file(stored, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    save_file(deq, os.path.join(d, "deq.safetensors"))
    cfg = json.load(open(os.path.join(base_dir, "config.json")))
    cfg["quantization_config"] = QUANT_CONFIG
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)

    # HF's Llama with the dequantised linears and their inputs fake-quantised.
    model = load_base()
    missing, unexpected = model.load_state_dict({**base_tensors, **deq}, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    for p in prefixes:
        def fake_quant(module, inputs, s=input_scales[p]):
            x = inputs[0]
            return (to_fp8(x, s).to(torch.float32) * s,) + tuple(inputs[1:])
        model.get_submodule(p).register_forward_pre_hook(fake_quant)
    prompts = [base_prompt] + [[1] + torch.randint(3, VOCAB, (PROMPT_LEN - 1,), generator=torch.Generator()
                                                    .manual_seed(3000 + s)).tolist() for s in range(20)]
    for prompt in prompts:
        prompt_logits, steps, greedy = run(model, prompt)
        if margin(steps) >= MIN_MARGIN:
            break
    else:
        sys.exit("no prompt gave a top-1 margin >= %g" % MIN_MARGIN)
    _, _, ref_greedy = run(base, prompt)
    full = model(torch.tensor([prompt + greedy[:-1]])).logits[0, len(prompt) - 1:].float()
    uncached = float((full - steps).abs().max())
    assert uncached < 1e-4, ("cached steps differ from an uncached forward", uncached)
    base_logits = base(torch.tensor([prompt])).logits[0].float()
    save_file({"prompt_logits": prompt_logits.contiguous(), "step_logits": steps.contiguous(),
               "greedy_ids": torch.tensor(greedy, dtype=torch.int64)}, os.path.join(d, "golden.safetensors"))
    meta = {"description": "compressed-tensors FP8 E4M3, per-tensor weights, static per-tensor input scales "
                           "(amax over the fixture's prompt / 448), lm_head f32",
            "base": "../../" + BASE, "quantization_config": QUANT_CONFIG, "prompt_ids": prompt,
            "calibration_prompt_ids": base_prompt, "greedy_ids": greedy, "base_greedy_ids": ref_greedy,
            "greedy_agreement_with_base": sum(a == b for a, b in zip(greedy, ref_greedy)), "new_tokens": NEW_TOKENS,
            "max_abs_logit_shift_vs_base": float((prompt_logits - base_logits).abs().max()),
            "min_top1_margin": margin(steps), "uncached_max_abs_diff": uncached,
            "input_scales": {p: float(s) for p, s in input_scales.items()},
            "compute": "float32, eager attention, CPU; HF LlamaForCausalLM with the linears set to deq.safetensors "
                       "and their inputs fake-quantised by forward pre-hooks",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "safetensors": safetensors.__version__}
    json.dump(meta, open(os.path.join(d, "golden.json"), "w"), indent=1)
    print(f"{NAME}: margin {meta['min_top1_margin']:.4f}, greedy {greedy}, agreement with the base "
          f"{meta['greedy_agreement_with_base']}/{NEW_TOKENS}, logit shift {meta['max_abs_logit_shift_vs_base']:.3f}")


if __name__ == "__main__":
    main()
