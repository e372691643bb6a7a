#!/usr/bin/env python3
"""Builds mmserve's gate-head routing fixtures (issue 16 item 4) with PyTorch and PEFT: a random router MLP over the
three LoRA fixtures and PEFT's output when two adapters are applied together with the router's weights.

Run where torch, transformers (>= 5), peft and safetensors are installed (the GPU host, on its CPU in float32):

    python3 tools/reference/make_gate_fixtures.py --fixtures tests/fixtures --out /tmp/fx   # then: cp -r /tmp/fx/lora_gate tests/fixtures/
    # only the distillation step over the existing gate fixture (torch + safetensors suffice):
    python3 tools/reference/make_gate_fixtures.py --fixtures tests/fixtures --out /tmp/fx --distill-only
                                                     # then: cp /tmp/fx/lora_gate/distill_step.safetensors tests/fixtures/lora_gate/

It writes lora_gate/:
  gate.safetensors   nn.Sequential(Linear(64, 256), ReLU(), Linear(256, 3)) under the attribute `gate`
                     (gate.0.weight [256, 64], gate.0.bias, gate.2.weight [3, 256], gate.2.bias), float32
  gate.json          {"adapters": the three lora fixtures' names, in the gate's output order}
  golden.safetensors embeddings [P, 64]: the mean of the base model's input embeddings over each prompt (the
                     embedding docs/lora.md defines; a text-only model's are embed_tokens rows); probs [P, 3] the
                     MLP's softmax; top2 I64 [P, 2] and top2_weights [P, 2] (renormalised); for the first prompt routed to
                     adapters 0 and 1 (golden.json's mix.prompt) mix_prompt_logits [len, V], mix_step_logits [N, V] and mix_greedy_ids I64 [N]: PEFT's model with
                     both chosen adapters active at once (PEFT sums active adapters' outputs), each lora_B scaled by
                     its weight: w1 * delta1 + w2 * delta2, unmerged, float32
  golden.json        prompts, the choices, versions
  distill_step.safetensors  one SGD step of the online distillation (issue 16 item 5) on gate.safetensors over
                     golden's embeddings [P, 64]: targets [P, 3] = softmax(cos(e, p_j) / 0.07) with the prototypes p_j
                     = the first 3 prompts' embeddings; loss [1] = F.kl_div(log_softmax(gate(e)), targets,
                     reduction="batchmean"), before the step; lr [1]; step.gate.{0,2}.{weight,bias}: the four tensors
                     after torch.optim.SGD(lr).step() (float32)

The gate is random (torch.manual_seed), its second layer scaled so that the prompts do not all pick the same pair.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_fixtures import margin, run  # noqa: E402

ADAPTERS = ["llama-qv-r4", "llama-all-r8-rslora", "llama-patterns-regex"]
HIDDEN = 256
DISTILL_LR = 0.05
DISTILL_TEMPERATURE = 0.07


class Router(torch.nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.gate = torch.nn.Sequential(torch.nn.Linear(d, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, n))

    def forward(self, e):
        return torch.softmax(self.gate(e).float(), dim=-1)


def write_distill_step(gate_dir, out):
    """One SGD step of KL(target || router) on the gate in gate_dir over its golden embeddings (the C++ twin:
    GateHead::kl_divergence + sgd_step, GateDistiller::target; tests/unit/models/gate_distill_test.cpp)."""
    from safetensors.torch import load_file, save_file
    state = load_file(os.path.join(gate_dir, "gate.safetensors"))
    emb = load_file(os.path.join(gate_dir, "golden.safetensors"))["embeddings"].float()
    n = state["gate.2.weight"].shape[0]
    router = Router(emb.shape[1], n)
    router.load_state_dict(state)
    with torch.enable_grad():
        protos = emb[:n]  # a running mean of one request each
        cos = torch.nn.functional.cosine_similarity(emb[:, None, :], protos[None, :, :], dim=-1)
        target = torch.softmax(cos / DISTILL_TEMPERATURE, dim=-1)
        log_probs = torch.log_softmax(router.gate(emb), dim=-1)
        loss = torch.nn.functional.kl_div(log_probs, target, reduction="batchmean")
        opt = torch.optim.SGD(router.parameters(), lr=DISTILL_LR)
        opt.zero_grad()
        loss.backward()
        opt.step()
    tensors = {"targets": target.detach().contiguous(), "loss": loss.detach().reshape(1).float(),
               "lr": torch.tensor([DISTILL_LR], dtype=torch.float32)}
    for k, v in router.state_dict().items():
        tensors["step." + k] = v.detach().contiguous()
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "distill_step.safetensors"))
    print(f"distill step: loss {loss.item():.6f}, lr {DISTILL_LR}, targets {target.tolist()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--distill-only", action="store_true",
                    help="write only lora_gate/distill_step.safetensors, from the existing fixtures' gate")
    args = ap.parse_args()
    if args.distill_only:
        write_distill_step(os.path.join(args.fixtures, "lora_gate"), os.path.join(args.out, "lora_gate"))
        return
    import peft
    import safetensors
    import transformers
    from peft import PeftModel
    from safetensors.torch import save_file
    torch.set_grad_enabled(False)
    base_dir = os.path.abspath(os.path.join(args.fixtures, "llama", "llama-gqa-f32"))
    meta = json.load(open(os.path.join(base_dir, "golden.json")))

    def load_base():
        return transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32,
                                                                 attn_implementation="eager").eval()

    base = load_base()
    embed = base.get_input_embeddings()
    g = torch.Generator().manual_seed(7)
    prompts = [meta["prompt_ids"]] + [torch.randint(3, 256, (n,), generator=g).tolist() for n in (5, 9, 13, 4, 17)]
    emb = torch.stack([embed(torch.tensor(p)).mean(dim=0) for p in prompts]).float()
    # The prompts' mean embeddings lie close together: amplify the first layer until the router separates them (the
    # first seed and scale with two or more pairs, one of them adapters 0 and 1; see below).
    for seed, scale in [(s, c) for c in (10.0, 30.0, 100.0, 300.0) for s in range(11, 31)]:
        torch.manual_seed(seed)
        router = Router(emb.shape[1], len(ADAPTERS)).eval()
        with torch.no_grad():
            router.gate[0].weight.mul_(scale)
            router.gate[2].weight.mul_(10.0)
        probs = router(emb)
        top = torch.topk(probs, 2, dim=-1)
        pairs = {tuple(sorted(x)) for x in top.indices.tolist()}
        if len(pairs) >= 2 and (0, 1) in pairs:
            break
    weights = top.values / top.values.sum(dim=-1, keepdim=True)
    print("seed", seed, "scale", scale, "probs", probs.tolist())
    print("pairs", pairs)
    assert len(pairs) >= 2 and (0, 1) in pairs, ("no seed and scale separate the prompts", probs)

    out = os.path.join(args.out, "lora_gate")
    os.makedirs(out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in router.state_dict().items()}, os.path.join(out, "gate.safetensors"))
    json.dump({"adapters": ADAPTERS}, open(os.path.join(out, "gate.json"), "w"), indent=1)

    # One prompt's pair applied together, by PEFT: the first prompt whose pair has list-typed target_modules only
    # (add_weighted_adapter refuses to mix a regex target_modules with lists), i.e. adapters 0 and 1.
    mix = next((p for p in range(len(prompts)) if set(top.indices[p].tolist()) == {0, 1}), None)
    assert mix is not None, ("no prompt routes to adapters 0 and 1", top.indices.tolist())
    i, j = top.indices[mix].tolist()
    wi, wj = weights[mix].tolist()
    lora_dir = os.path.join(args.fixtures, "lora")
    model = PeftModel.from_pretrained(load_base(), os.path.join(lora_dir, ADAPTERS[i]), adapter_name="a")
    model.load_adapter(os.path.join(lora_dir, ADAPTERS[j]), adapter_name="b")
    # Both adapters active at once (PEFT's LoRA layers add every active adapter's lora_B(lora_A(x)) * scaling), each
    # lora_B scaled in place by its weight: PEFT's own forward of w_a * delta_a + w_b * delta_b.
    from peft.tuners.lora import LoraLayer
    checked = 0
    for name, m in model.get_base_model().named_modules():
        if not isinstance(m, LoraLayer):
            continue
        for adapter, weight in (("a", wi), ("b", wj)):
            if adapter in m.lora_B:
                m.lora_B[adapter].weight.mul_(weight)
                checked += 1
    model.base_model.set_adapter(["a", "b"])
    model.eval()
    assert checked > 0
    prompt_logits, steps, greedy = run(model, prompts[mix])
    save_file({"embeddings": emb.contiguous(), "probs": probs.contiguous(), "top2": top.indices.to(torch.int64),
               "top2_weights": weights.contiguous(), "mix_prompt_logits": prompt_logits.contiguous(),
               "mix_step_logits": steps.contiguous(), "mix_greedy_ids": torch.tensor(greedy, dtype=torch.int64)},
              os.path.join(out, "golden.safetensors"))
    json.dump({"prompts": prompts, "adapters": ADAPTERS, "top2": top.indices.tolist(), "top2_weights": weights.tolist(),
               "mix": {"prompt": mix, "adapters": [ADAPTERS[i], ADAPTERS[j]], "weights": [wi, wj], "greedy_ids": greedy,
                       "min_top1_margin": margin(steps), "modules_checked": checked},
               "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
               "safetensors": safetensors.__version__},
              open(os.path.join(out, "golden.json"), "w"), indent=1)
    write_distill_step(out, out)
    print(f"gate: pairs {sorted(pairs)}; prompt {mix} mixes {ADAPTERS[i]} x {wi:.3f} + {ADAPTERS[j]} x {wj:.3f}, "
          f"greedy {greedy}, margin {margin(steps):.4f}, {checked} modules checked")


if __name__ == "__main__":
    main()
