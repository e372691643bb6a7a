#!/usr/bin/env python3
"""Builds mmserve's W4A16 conformance fixtures (issue 17): AWQ and GPTQ checkpoints of the committed tiny Llama,
packed by this script as the published packing code does, and HF transformers' goldens on the dequantised weights.

Run where torch, transformers (>= 5) and safetensors are installed (the GPU host; CPU float32, no network, no
autoawq / gptqmodel needed):

    python3 tools/reference/make_quant_fixtures.py --fixtures tests/fixtures --out /tmp/fx
    # then: cp -r /tmp/fx/quant tests/fixtures/   (rerunnable: the output is deterministic)

The base is tests/fixtures/llama/llama-gqa-f32 as committed (loaded with AutoModelForCausalLM, float32, eager); its
greedy ids are checked against its golden.json first. Each variant (VARIANTS below) quantises the seven linears of
every layer (q/k/v/o_proj, gate/up/down_proj; embeddings, norms and lm_head stay f32) and writes, under quant/<name>/:
  config.json          the base's config plus the quantization_config the hub's files carry for that format
  model.safetensors    the packed linears (<module>.qweight / .qzeros I32, .scales F16, GPTQ's .g_idx I32) and the
                       base's other tensors (F32)
  deq.safetensors      <module>.weight F32 [out, in] for every quantised linear: (q - zero) * scale, from an
                       independent unpacking of model.safetensors (pure Python integer bit extraction, not the torch
                       shifts the packers use), which must agree with the quantiser's own q, zeros and scales
  golden.safetensors   from LlamaForCausalLM holding the base's tensors with the linears replaced by deq.safetensors:
                         prompt_logits [P, V], step_logits [N, V] (the cached decode: run() of make_llama_fixtures.py),
                         greedy_ids I64 [N] (plain argmax)
  golden.json          base "../../llama/llama-gqa-f32", the format settings, prompt ids, greedy ids, the base model's
                       greedy ids and how many agree, the largest prompt-logit change against the base, the minimum
                       top-1 margin, the permutation seed (act-order: PERM_SEED + 100 layer + the linear's index in
                       LINEARS), versions
Tokenizers are not copied (the base has none; the tests pass ids).

Variants:
  awq-g32              AutoAWQ GEMM, group 32, zero_point true. Quantised as AutoAWQ's AwqQuantizer.
                       pseudo_quantize_tensor (zero point: scale = (max - min).clamp(1e-5) / 15, zero = -round(min /
                       scale) clamped to 0..15) and packed as WQLinear_GEMM.from_linear (awq/modules/linear/gemm.py):
                       intweight [K, N], qweight[:, col] |= intweight[:, 8 col + order_map[i]] << 4 i with order_map
                       [0, 2, 4, 6, 1, 3, 5, 7], qzeros the same over zeros [K/G, N], scales [K/G, N] f16. No activation-
                       aware scaling (it needs calibration data and only changes the float weights, not the format).
  gptq-v1-act-sym      GPTQ v1 (checkpoint_format "gptq"), group 32, desc_act true, sym true. Act-order without a
                       Hessian: a seeded random permutation perm of the input columns stands for the Hessian order,
                       groups are runs of 32 consecutive permuted columns and g_idx[perm[i]] = i // 32 (as GPTQ's
                       fasterquant assigns them); each group's scale from GPTQ's Quantizer.find_params (sym: zero 8).
                       Packed as AutoGPTQ's QuantLinear.pack (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py, with
                       g_idx as qlinear_cuda.py): intweight[:, idx] = round((W[:, idx] + scale_zeros[g_idx[idx]]) /
                       scales[g_idx[idx]]), qweight row r |= intweight[8 r + j] << 4 j (packed along K), zeros -= 1,
                       qzeros[:, c] |= zeros[:, 8 c + j] << 4 j (along N).
  gptq-v2-all          GPTQ v2 (checkpoint_format "gptq_v2"), group_size -1 (one group over K), desc_act false, sym
                       false. The same pack without `zeros -= 1`: v2 stores the zero (gptqmodel's
                       convert_gptq_v1_to_v2_format_module adds 1 to every 4-bit field of a v1 file's qzeros).
                       g_idx = k // K = 0 (AutoGPTQ writes g_idx even without act-order).
Scales are rounded to f16 before the weights are quantised, so that the q the packers recompute from the dequantised
weight and the f16 scale (as from_linear / pack do) is the quantiser's q exactly; AutoAWQ quantises an f16 model and
has f16 scales from the start, AutoGPTQ divides by its f16 copy of an f32 scale.

The prompt is the base's (its golden.json); should the quantised model's greedy run have a top-1 margin below
MIN_MARGIN somewhere (an ambiguous golden), the first of a few seeded prompts that has one is used instead.
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
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
MIN_MARGIN = 2e-3
PERM_SEED = 17

VARIANTS = {
    "awq-g32": dict(method="awq", group_size=32,
                    config={"quant_method": "awq", "zero_point": True, "group_size": 32, "bits": 4, "version": "gemm",
                            "modules_to_not_convert": None},
                    description="AutoAWQ GEMM, group 32, zero point (RTN as pseudo_quantize_tensor)"),
    "gptq-v1-act-sym": dict(method="gptq", group_size=32, desc_act=True, sym=True, v2=False,
                            config={"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True,
                                    "sym": True, "damp_percent": 0.01, "true_sequential": True,
                                    "checkpoint_format": "gptq"},
                            description="GPTQ v1, group 32, act-order (seeded permutation for g_idx), symmetric"),
    "gptq-v2-all": dict(method="gptq", group_size=-1, desc_act=False, sym=False, v2=True,
                        config={"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": False, "sym": False,
                                "damp_percent": 0.01, "true_sequential": True, "checkpoint_format": "gptq_v2"},
                        description="GPTQ v2, one group over in_features, asymmetric"),
}


def f16(x):
    return x.half().float()


# ---- Quantisers (ports of the published code; scales rounded to f16 first, see the docstring).

def awq_pseudo_quantize(w, group_size):
    """AutoAWQ AwqQuantizer.pseudo_quantize_tensor, zero_point=True: per [N, groups] scales and zeros, and q."""
    n, k = w.shape
    x = w.reshape(-1, group_size)
    max_val, min_val = x.amax(dim=1, keepdim=True), x.amin(dim=1, keepdim=True)
    scales = f16((max_val - min_val).clamp(min=1e-5) / 15)
    zeros = (-torch.round(min_val / scales)).clamp_(0, 15)
    q = torch.clamp(torch.round(x / scales) + zeros, 0, 15)
    return q.reshape(n, k), scales.reshape(n, -1), zeros.reshape(n, -1)


def gptq_find_params(x, sym):
    """GPTQ's Quantizer.find_params (per row of x, 4 bits, maxq 15): scale and zero."""
    maxq = 15
    tmp = torch.zeros(x.shape[0])
    xmin, xmax = torch.minimum(x.min(1)[0], tmp), torch.maximum(x.max(1)[0], tmp)
    if sym:
        xmax = torch.maximum(torch.abs(xmin), xmax)
        neg = xmin < 0
        xmin[neg] = -xmax[neg]
    both = (xmin == 0) & (xmax == 0)
    xmin[both], xmax[both] = -1, 1
    scale = f16((xmax - xmin) / maxq)
    zero = torch.full_like(scale, (maxq + 1) / 2) if sym else torch.round(-xmin / scale)
    return scale, zero


def gptq_quantize(w, group_size, desc_act, sym, seed):
    """Per group (runs of group_size columns in the act-order permutation): scale, zero; q; g_idx [K]."""
    n, k = w.shape
    g = k if group_size == -1 else group_size
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(seed)) if desc_act else torch.arange(k)
    g_idx = torch.empty(k, dtype=torch.int32)
    g_idx[perm] = (torch.arange(k) // g).to(torch.int32)
    groups = k // g
    scales, zeros = torch.empty(n, groups), torch.empty(n, groups)
    for j in range(groups):
        cols = perm[j * g:(j + 1) * g]
        scales[:, j], zeros[:, j] = gptq_find_params(w[:, cols], sym)
    s, z = scales[:, g_idx.long()], zeros[:, g_idx.long()]
    q = torch.clamp(torch.round(w / s) + z, 0, 15)
    return q, scales, zeros, g_idx


# ---- Packers (ports of the published packing loops).

def awq_pack(deq, scales_t, zeros_t, group_size):
    """WQLinear_GEMM.from_linear: deq [N, K] (the pseudo-quantised weight), scales_t / zeros_t [K/G, N]."""
    scale_zeros = zeros_t * scales_t
    scales_h = scales_t.half()
    k = deq.shape[1]
    intweight = torch.cat([torch.round((deq[:, idx] + scale_zeros[idx // group_size]) /
                                       scales_h[idx // group_size]).to(torch.int)[:, None] for idx in range(k)], dim=1)
    intweight = intweight.t().contiguous().to(torch.int32)  # [K, N]
    qweight = torch.zeros((intweight.shape[0], intweight.shape[1] // 8), dtype=torch.int32)
    for col in range(intweight.shape[1] // 8):
        for i in range(8):
            qweight[:, col] |= intweight[:, col * 8 + AWQ_ORDER[i]] << (i * 4)
    zeros = zeros_t.to(torch.int32)
    qzeros = torch.zeros((zeros.shape[0], zeros.shape[1] // 8), dtype=torch.int32)
    for col in range(zeros.shape[1] // 8):
        for i in range(8):
            qzeros[:, col] |= zeros[:, col * 8 + AWQ_ORDER[i]] << (i * 4)
    return {"qweight": qweight, "qzeros": qzeros, "scales": scales_h}


def gptq_pack(deq, scales, zeros, g_idx, v2):
    """AutoGPTQ QuantLinear.pack with g_idx: deq [N, K], scales / zeros [N, groups] (pack transposes them)."""
    scales_t, zeros_t = scales.t().contiguous(), zeros.t().contiguous()
    scale_zeros = zeros_t * scales_t
    scales_h = scales_t.clone().half()
    k = deq.shape[1]
    cols = []
    for idx in range(k):
        g = int(g_idx[idx])
        cols.append(torch.round((deq[:, idx] + scale_zeros[g]) / scales_h[g]).to(torch.int)[:, None])
    intweight = torch.cat(cols, dim=1)
    intweight = intweight.t().contiguous().numpy().astype(np.uint32)  # [K, N]
    qweight = np.zeros((intweight.shape[0] // 8, intweight.shape[1]), dtype=np.uint32)
    i, row = 0, 0
    while row < qweight.shape[0]:
        for j in range(i, i + 8):
            qweight[row] |= intweight[j] << (4 * (j - i))
        i += 8
        row += 1
    if not v2:
        zeros_t = zeros_t - 1
    z = zeros_t.numpy().astype(np.uint32)
    qzeros = np.zeros((z.shape[0], z.shape[1] // 8), dtype=np.uint32)
    i, col = 0, 0
    while col < qzeros.shape[1]:
        for j in range(i, i + 8):
            qzeros[:, col] |= z[:, j] << (4 * (j - i))
        i += 8
        col += 1
    return {"qweight": torch.from_numpy(qweight.astype(np.int32)), "qzeros": torch.from_numpy(qzeros.astype(np.int32)),
            "scales": scales_h, "g_idx": g_idx.clone()}


# ---- The independent unpacker: Python integers, one field at a time, written from the layouts (not the packers).

def nib(word, i):
    return ((int(word) & 0xFFFFFFFF) >> (4 * i)) & 0xF


def unpack_independent(method, packed, n, k, group_size, v2):
    """q [N][K], zeros [N][groups], scales [N][groups] (floats), group of each column [K], as Python lists."""
    g = k if group_size == -1 else group_size
    groups = k // g
    qw, qz = packed["qweight"].tolist(), packed["qzeros"].tolist()
    sc = packed["scales"].float().tolist()
    q = [[0] * k for _ in range(n)]
    zeros = [[0] * groups for _ in range(n)]
    scales = [[sc[j][c] for j in range(groups)] for c in range(n)]
    if method == "awq":  # column 8w + AWQ_ORDER[i] sits in nibble i of word w (along N)
        for c8 in range(n // 8):
            for i in range(8):
                c = 8 * c8 + AWQ_ORDER[i]
                for kk in range(k):
                    q[c][kk] = nib(qw[kk][c8], i)
                for j in range(groups):
                    zeros[c][j] = nib(qz[j][c8], i)
        group_of = [kk // g for kk in range(k)]
    else:  # input row 8r + i in nibble i of qweight[r][c] (along K); column 8w + i in nibble i of qzeros[j][w]
        for r in range(k // 8):
            for c in range(n):
                for i in range(8):
                    q[c][8 * r + i] = nib(qw[r][c], i)
        for j in range(groups):
            for c in range(n):
                zeros[c][j] = nib(qz[j][c // 8], c % 8) + (0 if v2 else 1)
        group_of = packed["g_idx"].tolist()
    return q, zeros, scales, group_of


def quantize_linear(name, w, spec, seed):
    """(packed tensors, dequantised [N, K] f32) for one linear, every representation cross-checked."""
    n, k = w.shape
    g = k if spec["group_size"] == -1 else spec["group_size"]
    if spec["method"] == "awq":
        q, scales, zeros = awq_pseudo_quantize(w, g)
        g_idx = torch.arange(k) // g
        deq = (q - zeros.repeat_interleave(g, dim=1)) * scales.repeat_interleave(g, dim=1)
        packed = awq_pack(deq, scales.t().contiguous(), zeros.t().contiguous(), g)
        v2 = True
    else:
        q, scales, zeros, g_idx = gptq_quantize(w, spec["group_size"], spec["desc_act"], spec["sym"], seed)
        deq = (q - zeros[:, g_idx.long()]) * scales[:, g_idx.long()]
        packed = gptq_pack(deq, scales, zeros, g_idx, spec["v2"])
        v2 = spec["v2"]
        assert spec["v2"] or bool((zeros >= 1).all()), (name, "a zero of 0 cannot be stored in GPTQ v1")
    uq, uz, us, ug = unpack_independent(spec["method"], packed, n, k, spec["group_size"], v2)
    assert uq == q.to(torch.int64).tolist(), (name, "unpacked q differs from the quantiser's")
    assert uz == zeros.to(torch.int64).tolist(), (name, "unpacked zeros differ")
    assert us == scales.tolist(), (name, "unpacked scales differ")
    assert ug == g_idx.tolist(), (name, "unpacked groups differ")
    mine = torch.tensor([[(uq[c][kk] - uz[c][ug[kk]]) * us[c][ug[kk]] for kk in range(k)] for c in range(n)],
                        dtype=torch.float64)
    assert torch.equal(mine.float(), deq.float()) and torch.equal(mine, mine.float().double()), (name, "not exact")
    return packed, deq.float().contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True, help="tests/fixtures (holds %s)" % BASE)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
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
    failures = []
    for name, spec in VARIANTS.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            d = os.path.join(args.out, "quant", name)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            stored, deq = {}, {}
            for layer in range(layers):
                for lin in LINEARS:
                    prefix = f"model.layers.{layer}.{lin}"
                    w = base_tensors[prefix + ".weight"].float()
                    seed = PERM_SEED + 100 * layer + LINEARS.index(lin)  # one act-order permutation per linear
                    packed, deq[prefix + ".weight"] = quantize_linear(prefix, w, spec, seed)
                    for key, t in packed.items():
                        stored[f"{prefix}.{key}"] = t.contiguous()
            for key, t in base_tensors.items():
                if key not in deq:
                    stored[key] = t.contiguous()
            save_file(stored, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
            save_file(deq, os.path.join(d, "deq.safetensors"))
            cfg = json.load(open(os.path.join(base_dir, "config.json")))
            cfg["quantization_config"] = spec["config"]
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
            # HF's Llama with the dequantised linears.
            model = load_base()
            missing, unexpected = model.load_state_dict({**base_tensors, **deq}, strict=False)
            assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
            prompts = [base_prompt] + [[1] + torch.randint(3, VOCAB, (PROMPT_LEN - 1,), generator=torch.Generator()
                                                            .manual_seed(2000 + s)).tolist() for s in range(20)]
            for prompt in prompts:
                prompt_logits, steps, greedy = run(model, prompt)
                if margin(steps) >= MIN_MARGIN:
                    break
            else:
                raise RuntimeError("no prompt gave a top-1 margin >= %g" % MIN_MARGIN)
            _, _, ref_greedy = run(base, prompt)
            full = model(torch.tensor([prompt + greedy[:-1]])).logits[0, len(prompt) - 1:].float()
            uncached = float((full - steps).abs().max())
            assert uncached < 1e-4, (name, "cached steps differ from an uncached forward", uncached)
            base_logits = base(torch.tensor([prompt])).logits[0].float()
            save_file({"prompt_logits": prompt_logits.contiguous(), "step_logits": steps.contiguous(),
                       "greedy_ids": torch.tensor(greedy, dtype=torch.int64)}, os.path.join(d, "golden.safetensors"))
            meta = {"description": spec["description"], "base": "../../" + BASE,
                    "quantization_config": spec["config"], "prompt_ids": prompt, "greedy_ids": greedy,
                    "base_greedy_ids": ref_greedy, "greedy_agreement_with_base": sum(
                        a == b for a, b in zip(greedy, ref_greedy)), "new_tokens": NEW_TOKENS,
                    "max_abs_logit_shift_vs_base": float((prompt_logits - base_logits).abs().max()),
                    "min_top1_margin": margin(steps), "uncached_max_abs_diff": uncached,
                    "perm_seed": PERM_SEED if spec.get("desc_act") else None,
                    "compute": "float32, eager attention, CPU; HF LlamaForCausalLM with the linears set to "
                               "deq.safetensors",
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "safetensors": safetensors.__version__}
            json.dump(meta, open(os.path.join(d, "golden.json"), "w"), indent=1)
            print(f"{name}: margin {meta['min_top1_margin']:.4f}, greedy {greedy}, agreement with the base "
                  f"{meta['greedy_agreement_with_base']}/{NEW_TOKENS}, logit shift "
                  f"{meta['max_abs_logit_shift_vs_base']:.3f}")
        except Exception as e:  # report every variant, fail at the end
            failures.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    if failures:
        sys.exit(f"failed: {failures}")


if __name__ == "__main__":
    main()
