#!/usr/bin/env python3
"""Builds mmserve's LoRA conformance fixtures with HF transformers + PEFT: random LoRA adapters over the committed
tiny Llama fixture and the goldens of the adapted model (issue 16).

Run where torch, transformers (>= 5), peft and safetensors are installed (the GPU host; it runs on the CPU in
float32 and needs no network):

    python3 tools/reference/make_lora_fixtures.py --fixtures tests/fixtures --out /tmp/fx
    # then: cp -r /tmp/fx/lora tests/fixtures/

The base model is tests/fixtures/llama/llama-gqa-f32 as committed (a variant may name another base: mixtral-attn-r4
adapts the attention of tests/fixtures/mixtral/mixtral-5x-top2-f32, the same way) (Llama, GQA 4/2, hidden 64, vocab 256, 2 layers,
untied; loaded with AutoModelForCausalLM in float32, attn_implementation="eager"); the prompt is that fixture's
prompt_ids (its golden.json), and the base's own greedy ids and step logits are checked first, so that the goldens
here sit on the very model mmserve loads. It writes, under lora/, one folder per adapter (VARIANTS below: q/v only at
rank 4; all seven linears at rank 8 with rsLoRA; a regex-string target_modules with rank_pattern and alpha_pattern):
  adapter_config.json, adapter_model.safetensors
                     PeftModel.save_pretrained output, kept as PEFT writes it (tensor names
                     base_model.model.<module>.lora_A.weight [r, in] / lora_B.weight [out, r], F32; the config with
                     target_modules as given, a list or a regex string, rank_pattern, alpha_pattern, use_rslora),
                     except one field: base_model_name_or_path (the local path the base was loaded from) is rewritten
                     to "../../llama/llama-gqa-f32", the base fixture relative to the adapter folder
                     (tests/fixtures/lora/<variant> -> tests/fixtures/llama/llama-gqa-f32). The README.md PEFT writes
                     (a model card) is removed.
  golden.safetensors F32 (I64 for ids), computed by the adapter reloaded from disk (PeftModel.from_pretrained over a
                     freshly loaded base, unmerged, float32):
                       prompt_logits  [P, V]: model(prompt).logits (one forward over the prompt)
                       step_logits    [N, V]: the logits that chose each greedy token: the prompt's last row, then one
                                      forward per generated token over the KV cache (run() of make_llama_fixtures.py)
                       greedy_ids     I64 [N]: plain argmax of step_logits
  golden.json        base (the relative path above), prompt ids, greedy ids (and the base model's), the minimum
                     top-1 margin, seed, the LoRA settings and, per adapted module (transformers' module names, e.g.
                     "model.layers.0.self_attn.q_proj"), the rank, alpha and the scale PEFT's LoraLayer.scaling holds
                     (alpha / r, or alpha / sqrt(r) with rsLoRA), the saved tensor names and shapes, the largest logit
                     change the adapter makes, merged_max_abs_diff, versions, the variant's description.

A fresh LoRA has lora_B = 0 and changes nothing (REFERENCE_NOTES): the adapters are built with init_lora_weights=False
under torch.manual_seed(seed), then every lora_A / lora_B pair is re-drawn (torch.manual_seed(seed) again) normal and
both scaled by one factor so that scaling * B @ A has a Frobenius norm RHO (0.5) times the base weight's: large enough
that the greedy continuation changes, whatever the rank and scale (the factors land near std 0.05-0.15). The first seed
whose adapted model decodes with a top-1 margin >= MIN_MARGIN at every step, >= MIN_DISTINCT distinct ids, greedy ids
other than the base model's and a prompt-logit change >= MIN_SHIFT is kept. Checked before anything is written: each
adapted module's rank, alpha and scaling equal what the variant expects (EXPECT: worked out here, not taken from
PEFT's pattern matching), in memory and after the reload; the set of adapted modules; the reloaded LoRA tensors equal
the ones in memory, bit for bit, and give the same logits; the cached step logits equal one uncached forward over
prompt + greedy ids (1e-4); merge_and_unload() of the reloaded adapter gives the unmerged prompt logits within 1e-4.
"""
import argparse
import copy
import json
import math
import os
import re
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never ask the hub (before transformers loads)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_fixtures import NEW_TOKENS, margin, run  # noqa: E402

BASE = "llama/llama-gqa-f32"          # under <fixtures>/: the variants' base unless a variant names its own
ADAPTER = "default"                  # PEFT's adapter name (save_pretrained drops it from the tensor names)
RHO = 0.5                            # ||scaling * B @ A||_F / ||W||_F for every adapted module
SEEDS = 80
MIN_MARGIN = 0.02                    # as the base fixture's (REFERENCE_NOTES: margins keep goldens unambiguous)
MIN_DISTINCT = 5
MIN_SHIFT = 0.05                     # max |prompt logits(adapter) - prompt logits(base)|
ALL_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name -> (LoraConfig arguments, EXPECT, description). EXPECT lists (regex searched in the module name, r, alpha),
# first match wins: the modules that must be adapted (any nn.Linear of the base matching one) and their settings,
# written out by hand so that PEFT's own matching of target_modules / rank_pattern / alpha_pattern is verified.
VARIANTS = {
    "llama-qv-r4": (
        dict(target_modules=["q_proj", "v_proj"], r=4, lora_alpha=8),
        [(r"\.self_attn\.(q_proj|v_proj)$", 4, 8)],
        "LoRA on q_proj and v_proj, r 4, alpha 8 (scale 2)"),
    "llama-all-r8-rslora": (
        dict(target_modules=ALL_LINEARS, r=8, lora_alpha=16, use_rslora=True),
        [(r"\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)$", 8, 16)],
        "LoRA on all seven linears, r 8, alpha 16, rsLoRA (scale alpha / sqrt(r) = 5.657)"),
    "llama-patterns-regex": (
        dict(target_modules=r".*\.(q_proj|o_proj|down_proj)$", r=4, lora_alpha=4,
             rank_pattern={"o_proj": 2, "layers.1.mlp.down_proj": 6}, alpha_pattern={"q_proj": 12}),
        [(r"\.self_attn\.q_proj$", 4, 12), (r"\.self_attn\.o_proj$", 2, 4), (r"\.layers\.1\.mlp\.down_proj$", 6, 4),
         (r"\.layers\.0\.mlp\.down_proj$", 4, 4)],
        "LoRA with target_modules a regex string (q_proj, o_proj, down_proj), r 4, alpha 4; rank_pattern "
        "{o_proj: 2, layers.1.mlp.down_proj: 6}, alpha_pattern {q_proj: 12}: scales q 3, o 2, down 1 (layer 0) "
        "and 2/3 (layer 1)"),
    # Mixtral (issue 16 item 1: its attention): q/k/v/o of the tiny HF Mixtral fixture; its experts are refused at
    # load (transformers 5 keeps them as fused parameters, which PEFT adapts through target_parameters, refused too).
    "mixtral-attn-r4": (
        dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], r=4, lora_alpha=8),
        [(r"\.self_attn\.(q|k|v|o)_proj$", 4, 8)],
        "LoRA on the attention of the tiny Mixtral (q, k, v, o), r 4, alpha 8 (scale 2)",
        "mixtral/mixtral-5x-top2-f32"),
    # LLaVA's decoder (transformers 5 module names: model.language_model.layers.N...), on the tiny LLaVA fixture's own
    # image and prompt; the vision tower and projector are left alone.
    "llava-lm-qv-r4": (
        dict(target_modules=r".*language_model.*\.(q_proj|v_proj)$", r=4, lora_alpha=8),
        [(r"language_model\.layers\.\d+\.self_attn\.(q|v)_proj$", 4, 8)],
        "LoRA on q_proj and v_proj of LLaVA's language model (a regex over the whole module tree), r 4, alpha 8",
        "llava/llava-llama-f32"),
    # LLaVA's projector (issue 16 item 1) with its decoder's o_proj: the projected image rows under the adapter.
    "llava-projector-r4": (
        dict(target_modules=r".*(multi_modal_projector\.linear_[12]|language_model.*\.o_proj)$", r=4, lora_alpha=8,
             rank_pattern={"linear_2": 2}),
        [(r"multi_modal_projector\.linear_1$", 4, 8), (r"multi_modal_projector\.linear_2$", 2, 8),
         (r"language_model\.layers\.\d+\.self_attn\.o_proj$", 4, 8)],
        "LoRA on LLaVA's projector (linear_1 r 4, linear_2 r 2 by rank_pattern) and its language model's o_proj, "
        "alpha 8",
        "llava/llava-llama-f32"),
}


# LoRA on raw parameters (PEFT's target_parameters): Mixtral's experts, which transformers 5 keeps as fused 3-D
# parameters (mlp.experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]). PEFT wraps each in a ParamWrapper (nested when
# a module has two: the first one listed is wrapped innermost, saved as "...experts.base_layer.lora_A.weight") whose
# lora_A is [E * r, in] (expert e's rows e*r .. e*r + r - 1) and lora_B [out, E * r] (expert e's rank j in column
# j * E + e): delta_e = scaling * B_e @ A_e added to expert e's [out, in] matrix. name -> (LoraConfig arguments,
# description, base).
PARAM_VARIANTS = {
    "mixtral-experts-r4": (
        dict(target_modules=[], target_parameters=["experts.gate_up_proj", "experts.down_proj"], r=4, lora_alpha=8),
        "LoRA on every expert of the tiny Mixtral (target_parameters: experts.gate_up_proj, experts.down_proj), r 4, "
        "alpha 8 (scale 2)",
        "mixtral/mixtral-5x-top2-f32"),
}


def param_wrappers(peft_model):
    """{(module name, parameter name): PEFT's ParamWrapper} of a model adapted through target_parameters."""
    from peft.tuners.lora.layer import ParamWrapper
    return {(name, m.parameter_name): m for name, m in peft_model.get_base_model().named_modules()
            if isinstance(m, ParamWrapper)}


def redraw_params(peft_model, seed):
    """Each ParamWrapper's lora_A, lora_B normal, scaled so that ||delta||_F = RHO ||param||_F over all experts."""
    torch.manual_seed(seed)
    stds = {}
    for key, m in sorted(param_wrappers(peft_model).items()):
        a, b = m.lora_A[ADAPTER].weight, m.lora_B[ADAPTER].weight
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        delta = m.get_delta_weight(ADAPTER)
        assert delta.shape == m.get_param().shape, (key, tuple(delta.shape), tuple(m.get_param().shape))
        c = math.sqrt(RHO * float(m.get_param().norm()) / float(delta.norm()))
        a.mul_(c)
        b.mul_(c)
        stds[".".join(key)] = c
    return stds


def check_param_structure(peft_model, r, alpha, what):
    """Every expert parameter of every layer is wrapped, with [E*r, in] / [out, E*r] factors and scaling alpha / r;
    the delta built by hand from the layout documented above equals PEFT's get_delta_weight. Returns the layout."""
    wrappers = param_wrappers(peft_model)
    layout = {}
    for (name, param), m in sorted(wrappers.items()):
        experts, rows, cols = m.get_param().shape  # [E, out, in] as Mixtral stores the experts
        a, b = m.lora_A[ADAPTER].weight, m.lora_B[ADAPTER].weight
        assert tuple(a.shape) == (experts * r, cols) and tuple(b.shape) == (rows, experts * r), (what, name, param)
        assert m.scaling[ADAPTER] == alpha / r, (what, name, m.scaling[ADAPTER])
        mine = torch.stack([m.scaling[ADAPTER] * b[:, e::experts] @ a[e * r:(e + 1) * r] for e in range(experts)])
        assert torch.allclose(mine, m.get_delta_weight(ADAPTER), atol=1e-6), (what, name, "layout differs")
        layout[f"{name}.{param}"] = {"module": name, "parameter": param, "experts": experts, "out": rows, "in": cols,
                                     "lora_A": [experts * r, cols], "lora_B": [rows, experts * r]}
    return layout


def make_param_variant(name, variant, args, base_of):
    import peft
    import safetensors
    import transformers
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors import safe_open
    from safetensors.torch import save_file
    config_args, desc, base_rel = variant
    base_dir, prompt, base_prompt, base_greedy, run, extra = base_of(base_rel)
    r, alpha = config_args["r"], config_args["lora_alpha"]
    for seed in range(SEEDS):
        torch.manual_seed(seed)
        model = get_peft_model(load_base(base_dir), LoraConfig(task_type="CAUSAL_LM", init_lora_weights=False,
                                                               lora_dropout=0.0, bias="none",
                                                               **copy.deepcopy(config_args))).eval()
        stds = redraw_params(model, seed)
        prompt_logits, steps, greedy = run(model, prompt)
        if margin(steps) >= MIN_MARGIN and len(set(greedy)) >= MIN_DISTINCT and greedy != base_greedy:
            break
    else:
        raise RuntimeError(name + ": no seed gave clear margins and a visible change")
    layout = check_param_structure(model, r, alpha, name)
    d = os.path.join(args.out, "lora", name)
    save_adapter(model, d, "../../" + base_rel)
    with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
        tensors = {k: list(f.get_tensor(k).shape) for k in f.keys()}
    reloaded = PeftModel.from_pretrained(load_base(base_dir), d, torch_device="cpu").eval()
    assert check_param_structure(reloaded, r, alpha, "reloaded") == layout
    for key, m in param_wrappers(model).items():
        other = param_wrappers(reloaded)[key]
        for part in ("lora_A", "lora_B"):
            assert torch.equal(getattr(m, part)[ADAPTER].weight, getattr(other, part)[ADAPTER].weight), (key, part)
    prompt_logits, steps, greedy = run(reloaded, prompt)
    full = reloaded(input_ids=torch.tensor([prompt + greedy[:-1]]), **extra).logits[0, len(prompt) - 1:].float()
    uncached_diff = float((full - steps).abs().max())
    assert uncached_diff < 1e-4, (name, "cached steps differ from an uncached forward", uncached_diff)
    shift = float((prompt_logits - base_prompt).abs().max())
    save_file({"prompt_logits": prompt_logits.contiguous(), "step_logits": steps.contiguous(),
               "greedy_ids": torch.tensor(greedy, dtype=torch.int64)}, os.path.join(d, "golden.safetensors"))
    meta = {"description": desc, "base": "../../" + base_rel, "seed": seed, "prompt_ids": prompt,
            "greedy_ids": greedy, "base_greedy_ids": base_greedy, "min_top1_margin": margin(steps),
            "new_tokens": NEW_TOKENS, "max_abs_logit_shift_vs_base": shift, "uncached_max_abs_diff": uncached_diff,
            "compute": "float32, eager attention, CPU; the adapter reloaded with PeftModel.from_pretrained, unmerged",
            "lora": {**{k: v for k, v in config_args.items()}, "scaling": alpha / r}, "layout": layout,
            "adapter_tensors": tensors, "init_std": stds,
            "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "safetensors": safetensors.__version__}
    json.dump(meta, open(os.path.join(d, "golden.json"), "w"), indent=1)
    print(f"{name}: seed {seed}, margin {meta['min_top1_margin']:.4f}, shift {shift:.3f}, greedy {greedy}, "
          f"tensors {tensors}")


def is_llava(base_dir):
    return json.load(open(os.path.join(base_dir, "config.json"))).get("model_type") == "llava"


def load_base(base_dir):
    import transformers
    cls = transformers.LlavaForConditionalGeneration if is_llava(base_dir) else transformers.AutoModelForCausalLM
    return cls.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager").eval()


def runner(base_dir):
    """model -> (prompt logits, step logits, greedy ids) on the base fixture's own inputs (a LLaVA: its golden's
    expanded input_ids and pixel_values, through make_llava_fixtures.run), and those inputs: (prompt ids, extra
    model inputs)."""
    if not is_llava(base_dir):
        return (lambda model, prompt: run(model, prompt)), {}
    from safetensors.torch import load_file
    from make_llava_fixtures import run as llava_run
    golden = load_file(os.path.join(base_dir, "golden.safetensors"))
    pixels = golden["pixel_values"]
    return (lambda model, prompt: llava_run(model, prompt, pixels)[:3]), {"pixel_values": pixels}


def lora_layers(peft_model):
    """{module name as in the base model ("model.layers.0.self_attn.q_proj"): PEFT's LoraLayer}."""
    from peft.tuners.lora import LoraLayer
    return {name: m for name, m in peft_model.get_base_model().named_modules() if isinstance(m, LoraLayer)}


def lora_layers_left(model):
    """The LoRA layers a merged model still holds (merge_and_unload() must leave none)."""
    from peft.tuners.lora import LoraLayer
    return [n for n, m in model.named_modules() if isinstance(m, LoraLayer)]


def expected_modules(base_dir, expect, load=None):
    """{module name: (r, alpha)} for every nn.Linear of the base (loaded by `load`, else load_base) that EXPECT
    names."""
    wanted = {}
    for name, m in (load or load_base)(base_dir).named_modules():
        if isinstance(m, torch.nn.Linear):
            for pattern, r, alpha in expect:
                if re.search(pattern, name):
                    wanted[name] = (r, alpha)
                    break
    return wanted


def check_structure(peft_model, wanted, rslora, what):
    """Every adapted module and its rank (lora_A / lora_B shapes), alpha and scaling are the expected ones.
    Returns {name: (r, alpha, scaling)} as PEFT holds them."""
    layers = lora_layers(peft_model)
    assert sorted(layers) == sorted(wanted), (what, "adapted modules", sorted(layers), "expected", sorted(wanted))
    found = {}
    for name, m in layers.items():
        r, alpha = wanted[name]
        a, b = m.lora_A[ADAPTER].weight, m.lora_B[ADAPTER].weight
        out_f, in_f = m.get_base_layer().weight.shape
        assert m.r[ADAPTER] == r, (what, name, "r", m.r[ADAPTER], "expected", r)
        assert tuple(a.shape) == (r, in_f) and tuple(b.shape) == (out_f, r), (what, name, tuple(a.shape),
                                                                              tuple(b.shape), "expected rank", r)
        assert m.lora_alpha[ADAPTER] == alpha, (what, name, "alpha", m.lora_alpha[ADAPTER], "expected", alpha)
        scale = alpha / math.sqrt(r) if rslora else alpha / r
        assert abs(m.scaling[ADAPTER] - scale) < 1e-9, (what, name, "scaling", m.scaling[ADAPTER], "expected", scale)
        found[name] = (m.r[ADAPTER], m.lora_alpha[ADAPTER], float(m.scaling[ADAPTER]))
    return found


def redraw(peft_model, seed):
    """lora_A, lora_B normal, both times one factor c per module: ||scaling * B @ A||_F = RHO * ||W||_F."""
    torch.manual_seed(seed)
    stds = {}
    for name, m in lora_layers(peft_model).items():
        a, b = m.lora_A[ADAPTER].weight, m.lora_B[ADAPTER].weight
        a0, b0 = torch.randn_like(a), torch.randn_like(b)
        delta = m.scaling[ADAPTER] * (b0 @ a0)
        c = math.sqrt(RHO * float(m.get_base_layer().weight.norm()) / float(delta.norm()))
        a.copy_(c * a0)
        b.copy_(c * b0)
        stds[name] = c
    return stds


def build_adapter(base_dir, config_args, seed):
    from peft import LoraConfig, get_peft_model
    task = None if is_llava(base_dir) else "CAUSAL_LM"  # PeftModel's plain forward passes pixel_values through
    config = LoraConfig(task_type=task, init_lora_weights=False, lora_dropout=0.0, bias="none",
                        **copy.deepcopy(config_args))
    torch.manual_seed(seed)
    model = get_peft_model(load_base(base_dir), config).eval()
    stds = redraw(model, seed)
    return model, stds


def load_adapter(base_dir, adapter_dir):
    from peft import PeftModel
    return PeftModel.from_pretrained(load_base(base_dir), adapter_dir, torch_device="cpu").eval()


def rewrite_base_path(path, new):
    """Sets adapter_config.json's base_model_name_or_path to `new`, leaving the rest of the text as PEFT wrote it."""
    text = open(path).read()
    before = json.loads(text)
    text, n = re.subn(r'("base_model_name_or_path"\s*:\s*)(null|"(?:[^"\\]|\\.)*")',
                      lambda mt: mt.group(1) + json.dumps(new), text)
    assert n == 1, (path, "base_model_name_or_path found", n, "times")
    after = json.loads(text)
    assert after["base_model_name_or_path"] == new, after["base_model_name_or_path"]
    assert {k: v for k, v in after.items() if k != "base_model_name_or_path"} == \
           {k: v for k, v in before.items() if k != "base_model_name_or_path"}, "the rewrite changed other fields"
    open(path, "w").write(text)


def save_adapter(model, d, base_path):
    """PeftModel.save_pretrained into a fresh `d`, PEFT's README.md (a model card) removed and base_model_name_or_path
    rewritten to `base_path` (the base seen from `d`). Returns the adapter_config.json path."""
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model.save_pretrained(d)
    if os.path.exists(os.path.join(d, "README.md")):
        os.remove(os.path.join(d, "README.md"))
    cfg_path = os.path.join(d, "adapter_config.json")
    rewrite_base_path(cfg_path, base_path)
    return cfg_path


def saved_tensors(path, wanted):
    """{saved name: shape}; every tensor is a lora_A / lora_B weight (F32) of an expected module, and each has both."""
    from safetensors import safe_open
    names = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            assert t.dtype == torch.float32, (k, t.dtype)
            names[k] = list(t.shape)
    modules = set()
    for k in names:
        mt = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])\.weight", k)
        assert mt and mt.group(1) in wanted, ("unexpected tensor in adapter_model.safetensors", k)
        modules.add(mt.group(1))
    assert modules == set(wanted) and len(names) == 2 * len(wanted), (sorted(names), sorted(wanted))
    return dict(sorted(names.items()))


def choose_seed(base_dir, config_args, wanted, rslora, prompt, base_prompt, base_greedy, run):
    """The first seed whose adapter decodes with clear margins, varied ids, other ids than the base's and a visible
    logit change: (seed, model, stds)."""
    tried = []
    for seed in range(SEEDS):
        model, stds = build_adapter(base_dir, config_args, seed)
        check_structure(model, wanted, rslora, f"seed {seed}")
        prompt_logits, steps, greedy = run(model, prompt)
        shift = float((prompt_logits - base_prompt).abs().max())
        ok = (margin(steps) >= MIN_MARGIN and len(set(greedy)) >= MIN_DISTINCT and greedy != base_greedy
              and shift >= MIN_SHIFT)
        if ok:
            return seed, model, stds
        tried.append(f"seed {seed}: margin {margin(steps):.4f}, {len(set(greedy))} distinct, "
                     f"{'same as' if greedy == base_greedy else 'unlike'} base, shift {shift:.3f}")
    raise RuntimeError("no seed gave clear margins, varied ids and a visible change:\n  " + "\n  ".join(tried))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True, help="tests/fixtures (holds %s and each variant's base)" % BASE)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    try:
        import peft
    except Exception as e:  # not installed, or an install that does not import with this torch / transformers
        sys.exit(f"make_lora_fixtures.py needs PEFT beside torch, transformers and safetensors "
                 f"(pip install peft): {e}")
    import safetensors
    import transformers
    from safetensors.torch import load_file, save_file
    torch.set_grad_enabled(False)

    bases = {}

    def base_of(rel):
        """(dir, prompt, base prompt logits, base greedy ids) of a base fixture, checked once against its goldens."""
        if rel not in bases:
            base_dir = os.path.abspath(os.path.join(args.fixtures, rel))
            base_meta = json.load(open(os.path.join(base_dir, "golden.json")))
            prompt, base_greedy_golden = base_meta["prompt_ids"], base_meta["greedy_ids"]
            run_fn, extra = runner(base_dir)
            # The base as committed decodes as its goldens say (else everything below sits on another model).
            base_prompt, base_steps, base_greedy = run_fn(load_base(base_dir), prompt)
            base_golden = load_file(os.path.join(base_dir, "golden.safetensors"))
            assert base_greedy == base_greedy_golden, ("the base fixture decodes otherwise", rel, base_greedy,
                                                       base_greedy_golden)
            assert torch.allclose(base_steps, base_golden["step_logits"], atol=1e-4, rtol=1e-4), (
                rel, "base step logits differ")
            print(f"base {rel}: prompt {prompt}, greedy {base_greedy} (as its golden.json)")
            bases[rel] = (base_dir, prompt, base_prompt, base_greedy, run_fn, extra)
        return bases[rel]

    failures = []
    for name, variant in VARIANTS.items():
        if args.only and name not in args.only.split(","):
            continue
        config_args, expect, desc = variant[:3]
        base_rel = variant[3] if len(variant) > 3 else BASE
        BASE_REL = "../../" + base_rel  # the base, seen from <fixtures>/lora/<variant>/
        try:
            base_dir, prompt, base_prompt, base_greedy, run, extra = base_of(base_rel)
            rslora = config_args.get("use_rslora", False)
            wanted = expected_modules(base_dir, expect)
            seed, model, stds = choose_seed(base_dir, config_args, wanted, rslora, prompt, base_prompt, base_greedy,
                                            run)
            d = os.path.join(args.out, "lora", name)
            cfg_path = save_adapter(model, d, BASE_REL)
            tensors = saved_tensors(os.path.join(d, "adapter_model.safetensors"), wanted)

            # Goldens from the adapter as written, over a fresh base; checked against the one in memory.
            reloaded = load_adapter(base_dir, d)
            found = check_structure(reloaded, wanted, rslora, "reloaded")
            mem_layers, re_layers = lora_layers(model), lora_layers(reloaded)
            for mod in wanted:
                for part in ("lora_A", "lora_B"):
                    assert torch.equal(getattr(mem_layers[mod], part)[ADAPTER].weight,
                                       getattr(re_layers[mod], part)[ADAPTER].weight), (mod, part, "differs")
            prompt_logits, steps, greedy = run(reloaded, prompt)
            _, mem_steps, mem_greedy = run(model, prompt)
            assert mem_greedy == greedy, (name, mem_greedy, greedy)
            assert torch.allclose(mem_steps, steps, atol=1e-5, rtol=1e-5), (
                name, "reloaded differs from memory", float((mem_steps - steps).abs().max()))
            # The cached steps agree with one uncached forward over prompt + greedy ids.
            full = reloaded(input_ids=torch.tensor([prompt + greedy[:-1]]), **extra).logits[0, len(prompt) - 1:].float()
            uncached_diff = float((full - steps).abs().max())
            assert uncached_diff < 1e-4, (name, "cached steps differ from an uncached forward", uncached_diff)
            # A plain LoRA: merged into the weights it gives the same logits.
            merged = load_adapter(base_dir, d).merge_and_unload().eval()
            assert not lora_layers_left(merged), "merge_and_unload() left LoRA layers"
            merged_prompt, merged_steps, merged_greedy = run(merged, prompt)
            merged_diff = float((merged_prompt - prompt_logits).abs().max())
            assert merged_diff < 1e-4, (name, "merged prompt logits differ", merged_diff)
            assert merged_greedy == greedy, (name, "merged greedy ids differ", merged_greedy, greedy)
            shift = float((prompt_logits - base_prompt).abs().max())
            assert shift >= MIN_SHIFT, (name, "the adapter barely moves the logits", shift)

            save_file({"prompt_logits": prompt_logits.contiguous(), "step_logits": steps.contiguous(),
                       "greedy_ids": torch.tensor(greedy, dtype=torch.int64)},
                      os.path.join(d, "golden.safetensors"))
            saved_cfg = json.load(open(cfg_path))
            meta = {"description": desc, "base": BASE_REL,
                    "base_note": "relative to this folder (tests/fixtures/lora/<variant> -> "
                                 "tests/fixtures/" + base_rel + "); adapter_config.json's "
                                 "base_model_name_or_path was rewritten to it from the local path PEFT wrote",
                    "compute": "float32, eager attention, CPU; the adapter reloaded with PeftModel.from_pretrained, "
                               "unmerged",
                    "seed": seed, "prompt_ids": prompt, "greedy_ids": greedy, "base_greedy_ids": base_greedy,
                    "greedy_positions_unlike_base": sum(1 for x, y in zip(greedy, base_greedy) if x != y),
                    "min_top1_margin": margin(steps), "new_tokens": NEW_TOKENS,
                    "max_abs_logit_shift_vs_base": shift, "merged_max_abs_diff": merged_diff,
                    "merged_step_max_abs_diff": float((merged_steps - steps).abs().max()),
                    "uncached_max_abs_diff": uncached_diff,
                    "lora": {"target_modules": config_args["target_modules"], "r": config_args["r"],
                             "lora_alpha": config_args["lora_alpha"], "use_rslora": rslora,
                             "rank_pattern": config_args.get("rank_pattern", {}),
                             "alpha_pattern": config_args.get("alpha_pattern", {}),
                             "lora_dropout": 0.0, "bias": "none",
                             "task_type": None if is_llava(base_dir) else "CAUSAL_LM",
                             "saved_target_modules": saved_cfg.get("target_modules"),
                             "ranks": {k: v[0] for k, v in sorted(found.items())},
                             "alphas": {k: v[1] for k, v in sorted(found.items())},
                             "scaling": {k: v[2] for k, v in sorted(found.items())}},
                    "adapter_tensors": tensors,
                    "init": f"init_lora_weights=False under torch.manual_seed({seed}), then lora_A, lora_B redrawn "
                            f"N(0, 1) (torch.manual_seed({seed})) and both scaled by one factor per module so that "
                            f"||scaling * B @ A||_F = {RHO} ||W||_F",
                    "init_std": {k: v for k, v in sorted(stds.items())},
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "peft": peft.__version__, "safetensors": safetensors.__version__}
            json.dump(meta, open(os.path.join(d, "golden.json"), "w"), indent=1)
            short = {re.sub(r"^model\.layers\.(\d+)\.(self_attn|mlp)\.", r"\1.", k): f"r{v[0]}/a{v[1]}/s{v[2]:.4g}"
                     for k, v in sorted(found.items())}
            print(f"{name}: seed {seed}, margin {meta['min_top1_margin']:.4f}, shift {shift:.3f}, "
                  f"merged diff {merged_diff:.2e}, {meta['greedy_positions_unlike_base']}/{NEW_TOKENS} ids unlike "
                  f"base, greedy {greedy}")
            print(f"  modules (r/alpha/scaling): {short}")
        except Exception as e:  # report every variant, fail at the end
            import traceback
            traceback.print_exc()
            failures.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    for name, variant in PARAM_VARIANTS.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            make_param_variant(name, variant, args, base_of)
        except Exception as e:
            import traceback
            traceback.print_exc()
            failures.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    if failures:
        sys.exit(f"failed: {failures}")


if __name__ == "__main__":
    main()
