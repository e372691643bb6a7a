#!/usr/bin/env python3
"""Builds mmserve's Mixtral conformance fixtures with HF transformers: tiny random MixtralForCausalLM models, their
greedy goldens and the router's choices per token and layer (issue 15 item 2).

Run where torch, transformers (>= 5) and safetensors are installed (the GPU host; it runs on the CPU in float32):

    python3 tools/reference/make_mixtral_fixtures.py --out /tmp/fx   # then: cp -r /tmp/fx/mixtral tests/fixtures/

It writes, under mixtral/, one folder per variant (MODELS below: an odd expert count with top-2, and top-3 of 7
with GQA 1 K/V head and a sliding window, F32 and BF16 storage, the two checkpoint layouts users have), each with:
  config.json, model.safetensors   save_pretrained output; in the hub's per-expert names (block_sparse_moe.gate,
                                   experts.E.w1/w2/w3), which transformers 5.17 also writes; were it to write its
                                   fused layout (mlp.experts.gate_up_proj), the file is rewritten in those names and
                                   HF must load it to the same logits
  golden.safetensors               F32, from the directory reloaded in float32 (eager attention):
                                     prompt_logits [P, V], step_logits [N, V], greedy_ids I64 [N] (as the Llama
                                     fixtures: tools/reference/make_llama_fixtures.py)
                                     router_logits [L, P + N - 1, E]: the router's logits of every token the cached
                                                   run fed (the prompt, then each greedy token but the last), per layer
                                     router_topk   I64 [L, P + N - 1, K]: the experts chosen (descending weight)
                                     router_weights [L, P + N - 1, K]: their renormalised softmax weights
                                     bf16_prompt_logits, bf16_step_logits: HF's bf16 run fed greedy_ids (2x rule)
  golden.json                      ids, margins (top-1 logit margin; the smallest router logit gap between the
                                   K-th and K+1-th expert), seed, versions, layout

The router logits are computed from each MoE block's input (a forward pre-hook) with the block's own gate weight,
softmax in float32, top-k, renormalised: Mixtral's routing (modeling_mixtral.py); when the model returns its own
router_logits (output_router_logits=True) they are checked against these. Seeds are drawn until the greedy run has
a top-1 margin >= 0.02, >= 6 distinct ids, and every routing decision a router logit gap >= 0.05 between the K-th
and K+1-th expert (so that bf16 on the GPU routes the same tokens the same way).
"""
import argparse
import copy
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_fixtures import margin, run_forced  # noqa: E402

VOCAB = 256
PROMPT_LEN = 9
NEW_TOKENS = 12

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, sliding_window=None, router_jitter_noise=0.0,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})

# name -> (config overrides, storage dtype, description)
MODELS = {
    "mixtral-5x-top2-f32": (dict(num_local_experts=5, num_experts_per_tok=2), torch.float32,
                            "Mixtral, 5 experts (odd), top-2, GQA 4/2"),
    "mixtral-7x-top3-bf16": (dict(num_local_experts=7, num_experts_per_tok=3, num_key_value_heads=1,
                                          sliding_window=6),
                                     torch.bfloat16, "Mixtral, 7 experts, top-3, multi-query, sliding window 6"),
}


def build(overrides, seed):
    import transformers
    cfg = transformers.MixtralConfig(**{**BASE, **overrides})
    cfg.architectures = ["MixtralForCausalLM"]
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.MixtralForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif re.search(r"\.gate(\.weight)?$", name):  # the router: spread its logits (clear decisions)
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    return model


def moe_blocks(model):
    """The MoE blocks in layer order (4.x: layers.N.block_sparse_moe, 5.x: layers.N.mlp), each with its gate."""
    blocks = []
    for name, m in model.named_modules():
        if hasattr(m, "gate") and hasattr(m, "experts") and re.search(r"layers\.\d+\.(block_sparse_moe|mlp)$", name):
            blocks.append(m)
    assert len(blocks) == model.config.num_hidden_layers, [n for n, _ in model.named_modules()][:40]
    return blocks


def run_routed(model, prompt):
    """prompt logits, cached step logits, greedy ids, and the router logits [L, T, E] of every token fed."""
    captured = [[] for _ in range(model.config.num_hidden_layers)]
    hooks = []
    for i, block in enumerate(moe_blocks(model)):
        def pre(mod, args, kwargs, i=i):
            h = args[0] if args else kwargs["hidden_states"]
            w = mod.gate.weight
            captured[i].append(torch.nn.functional.linear(h.reshape(-1, h.shape[-1]).float(), w.float()))
        hooks.append(block.register_forward_pre_hook(pre, with_kwargs=True))
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for c in captured:
            c.clear()
        prompt_logits = model(ids).logits[0].float()
        for c in captured:
            c.clear()
        out = model(ids, use_cache=True)
        steps, greedy = [], []
        logits = out.logits[0, -1].float()
        for t in range(NEW_TOKENS):
            steps.append(logits)
            nxt = int(torch.argmax(logits))
            greedy.append(nxt)
            if t + 1 == NEW_TOKENS:
                break
            out = model(torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
            logits = out.logits[0, -1].float()
    for h in hooks:
        h.remove()
    router = torch.stack([torch.cat(c, dim=0) for c in captured])  # [L, P + N - 1, E]
    return prompt_logits, torch.stack(steps), greedy, router


def routing(router_logits, k):
    """The experts chosen, their renormalised weights, and the smallest logit gap between the K-th and K+1-th
    expert (a gap in logits is the ratio of the two probabilities: what rounding has to overcome to swap them)."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    top = torch.topk(probs, k, dim=-1)
    weights = top.values / top.values.sum(-1, keepdim=True)
    sorted_logits = torch.sort(router_logits.float(), dim=-1, descending=True).values
    gap = float((sorted_logits[..., k - 1] - sorted_logits[..., k]).min()) if k < probs.shape[-1] else 1e9
    return top.indices, weights, gap


def to_v4_names(path, cfg):
    """Rewrites model.safetensors in transformers 4.x's per-expert names (what the hub's checkpoints hold).
    Returns the layout the file had as written by save_pretrained."""
    from safetensors.torch import load_file, save_file
    sd = load_file(path)
    i_size = cfg.intermediate_size
    out, layout = {}, "v4"
    for name, t in sd.items():
        m = re.match(r"(model\.layers\.\d+)\.mlp\.experts\.gate_up_proj$", name)
        if m:
            layout = "v5-fused"
            assert t.shape == (cfg.num_local_experts, 2 * i_size, cfg.hidden_size), t.shape
            for e in range(t.shape[0]):
                out[f"{m.group(1)}.block_sparse_moe.experts.{e}.w1.weight"] = t[e, :i_size].clone()
                out[f"{m.group(1)}.block_sparse_moe.experts.{e}.w3.weight"] = t[e, i_size:].clone()
            continue
        m = re.match(r"(model\.layers\.\d+)\.mlp\.experts\.down_proj$", name)
        if m:
            assert t.shape == (cfg.num_local_experts, cfg.hidden_size, i_size), t.shape
            for e in range(t.shape[0]):
                out[f"{m.group(1)}.block_sparse_moe.experts.{e}.w2.weight"] = t[e].clone()
            continue
        m = re.match(r"(model\.layers\.\d+)\.mlp\.gate\.weight$", name)
        if m:
            out[f"{m.group(1)}.block_sparse_moe.gate.weight"] = t
            continue
        out[name] = t
    save_file(out, path, metadata={"format": "pt"})
    return layout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import transformers
    from safetensors import safe_open
    from safetensors.torch import save_file
    torch.set_grad_enabled(False)
    failures = []
    for name, (overrides, dtype, desc) in MODELS.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            chosen = None
            k = overrides["num_experts_per_tok"]
            for seed in range(2000):
                model = build(overrides, seed)
                if dtype != torch.float32:
                    for p in model.parameters():
                        p.copy_(p.to(dtype).float())
                g = torch.Generator().manual_seed(1000 + seed)
                prompt = [1] + torch.randint(3, VOCAB, (PROMPT_LEN - 1,), generator=g).tolist()
                _, steps, greedy, router = run_routed(model, prompt)
                _, _, gap = routing(router, k)
                if margin(steps) >= 0.02 and len(set(greedy)) >= 6 and gap >= 0.05:
                    chosen = (seed, model, prompt)
                    break
            if chosen is None:
                raise RuntimeError("no seed gave clear margins, varied ids and clear routing")
            seed, model, prompt = chosen
            d = os.path.join(args.out, "mixtral", name)
            os.makedirs(d, exist_ok=True)
            copy.deepcopy(model).to(dtype).save_pretrained(d, safe_serialization=True)
            st = os.path.join(d, "model.safetensors")
            with safe_open(st, "pt") as f:
                saved_names = sorted(f.keys())
            saved_layout = "v5-fused" if any("gate_up_proj" in n for n in saved_names) else "v4"
            layout = saved_layout
            if layout != "v4":  # the hub's per-expert names, which save_pretrained in transformers 5.17 also writes
                to_v4_names(st, model.config)
                layout = "v4"
            reloaded = transformers.MixtralForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                                       attn_implementation="eager").eval()
            prompt_logits, steps, greedy, router = run_routed(reloaded, prompt)
            _, mem_steps, mem_greedy, mem_router = run_routed(model, prompt)
            assert mem_greedy == greedy, (name, mem_greedy, greedy)
            assert torch.allclose(mem_steps, steps, atol=1e-5, rtol=1e-5), (name, "reloaded differs from memory")
            assert torch.allclose(mem_router, router, atol=1e-5, rtol=1e-5), (name, "router differs after reload")
            topk, weights, gap = routing(router, k)
            # The model's own router logits, where it returns them, equal the hook's.
            own = None
            try:
                o = reloaded(torch.tensor([prompt]), output_router_logits=True)
                if getattr(o, "router_logits", None) is not None:
                    own = torch.stack([r.reshape(-1, r.shape[-1]).float() for r in o.router_logits])
                    assert torch.allclose(own, router[:, :len(prompt)], atol=1e-5, rtol=1e-5), "router_logits"
            except TypeError:
                pass
            reloaded.generation_config.eos_token_id = None
            reloaded.generation_config.pad_token_id = 0
            gen = reloaded.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                    output_logits=True, return_dict_in_generate=True)
            assert gen.sequences[0, len(prompt):].tolist() == greedy, (name, "generate() differs")
            bf16 = transformers.MixtralForCausalLM.from_pretrained(d, dtype=torch.bfloat16,
                                                                   attn_implementation="eager").eval()
            bf16_prompt, bf16_steps = run_forced(bf16, prompt, greedy)
            save_file({"prompt_logits": prompt_logits.contiguous(), "step_logits": steps.contiguous(),
                       "greedy_ids": torch.tensor(greedy, dtype=torch.int64),
                       "router_logits": router.contiguous(), "router_topk": topk.to(torch.int64).contiguous(),
                       "router_weights": weights.float().contiguous(),
                       "bf16_prompt_logits": bf16_prompt.contiguous(), "bf16_step_logits": bf16_steps.contiguous()},
                      os.path.join(d, "golden.safetensors"))
            meta = {"description": desc, "architecture": "MixtralForCausalLM",
                    "storage_dtype": str(dtype).replace("torch.", ""), "compute": "float32, eager attention",
                    "seed": seed, "prompt_ids": prompt, "greedy_ids": greedy, "min_top1_margin": margin(steps),
                    "min_router_gap": gap, "new_tokens": NEW_TOKENS, "layout": layout,
                    "layout_save_pretrained_writes": saved_layout, "saved_tensor_names": saved_names[:40],
                    "model_returned_router_logits": own is not None,
                    "transformers": transformers.__version__, "torch": torch.__version__,
                    "reinit": "normal std 0.08, routers 0.5, norms 1 + 0.1 N(0,1)"}
            json.dump(meta, open(os.path.join(d, "golden.json"), "w"), indent=1)
            if os.path.exists(os.path.join(d, "generation_config.json")):
                os.remove(os.path.join(d, "generation_config.json"))
            print(f"{name}: seed {seed}, margin {meta['min_top1_margin']:.4f}, router gap {gap:.4f}, "
                  f"layout {layout} (save_pretrained: {saved_layout}), greedy {greedy}")
        except Exception as e:  # report every variant, fail at the end
            import traceback
            traceback.print_exc()
            failures.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    if failures:
        sys.exit(f"failed: {failures}")


if __name__ == "__main__":
    main()
