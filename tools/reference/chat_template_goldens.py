#!/usr/bin/env python3
"""Renders each real chat template in tests/fixtures/chat_templates/templates/ over a fixed set of conversations,
the way HF transformers 5's apply_chat_template does, and writes the results as goldens for the C++ interpreter.

    python3 tools/reference/chat_template_goldens.py                 # local jinja2, writes goldens.json
    python3 tools/reference/chat_template_goldens.py --hf OUT.json   # the GPU host: real apply_chat_template
    python3 tools/reference/chat_template_goldens.py --hf-render OUT.json  # there: render_jinja_template
    python3 tools/reference/chat_template_goldens.py --compare A.json B.json

Local mode builds the Jinja environment exactly as transformers' `_cached_compile_jinja_template`
(src/transformers/utils/chat_template_utils.py) does: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]), HF's own `tojson` filter
(json.dumps with ensure_ascii=False and indent/separators/sort_keys passed through), `raise_exception` raising
TemplateError, and `strftime_now`. It renders with messages, tools, documents, add_generation_prompt and the extra
kwargs bos_token/eos_token (apply_chat_template passes the tokenizer's special tokens) plus each case's own kwargs.
`--hf` renders with transformers' own apply_chat_template (a tiny WordLevel tokenizer per template carrying its
bos/eos tokens and chat_template), so the golden is HF's own output; `--compare` diffs two golden files. The clock is pinned to 2026-12-02 12:00:00 in both modes
(strftime_now would otherwise make the goldens depend on the day); the C++ tests pin theirs the same way.

Each golden is {template, case, add_generation_prompt, kwargs, output} or, where HF's render raises, {..., error,
error_type}: the C++ side must fail too, with raise_exception's exact message.
"""
import argparse
import datetime as _dt
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures", "chat_templates"))
PINNED_NOW = _dt.datetime(2026, 12, 2, 12, 0, 0)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

UNICODE_TEXT = 'Grüß Gott — 你好 😀 "quoted" \\ back\tslash\nnew line'

# name -> messages. Content is a string unless the case is about content parts.
CASES = {
    "user_only": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2 + 2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "multi_turn_no_system": [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "First answer"},
        {"role": "user", "content": "Second question"},
        {"role": "assistant", "content": "Second answer"},
    ],
    "unicode_and_spaces": [
        {"role": "system", "content": "  padded system  \n"},
        {"role": "user", "content": UNICODE_TEXT},
        {"role": "assistant", "content": "  Ça va? ☕  "},
        {"role": "user", "content": "\n\nend\n"},
    ],
    "content_parts": [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this image?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
        {"role": "user", "content": [{"type": "text", "text": "And the colour?"}, {"type": "image"}]},
    ],
    "content_parts_system": [
        {"role": "system", "content": [{"type": "text", "text": "You describe images."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]},
    ],
    "tools": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call9abcd",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call9abcd", "name": "get_weather", "content": "{\"temperature\": 21.5}"},
        {"role": "assistant", "content": "It is 21.5 °C in Paris."},
        {"role": "user", "content": "Thanks"},
    ],
    "tools_first_turn": [{"role": "user", "content": "Weather in Tokyo, please."}],
    "reasoning": [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "<think>\nCheck divisors up to 4.\n</think>\n\nYes, 17 is prime."},
        {"role": "user", "content": "And 21?"},
        {"role": "assistant", "content": "No: 21 = 3 * 7.", "reasoning_content": "3 divides 21."},
        {"role": "user", "content": "Thanks!"},
    ],
    "non_alternating": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
    "assistant_last": [
        {"role": "user", "content": "Say hi"},
        {"role": "assistant", "content": "Hi there"},
    ],
}

# Extra template kwargs per case (apply_chat_template passes unknown kwargs to the template).
CASE_KWARGS = {
    "tools": {"tools": [WEATHER_TOOL]},
    "tools_first_turn": {"tools": [WEATHER_TOOL]},
}
# Extra renderings of some (template, case) pairs with template-specific kwargs.
EXTRA = [
    ("qwen3", "reasoning", {"enable_thinking": False}),
    ("qwen3", "user_only", {"enable_thinking": False}),
    ("llama3_2", "user_only", {"date_string": "01 Jan 2025"}),
    ("llama3_2", "tools", {"tools_in_user_message": False}),
    ("qwen2_vl", "content_parts", {"add_vision_id": True}),
    ("llama3_2", "system_user", {"custom_tools": [WEATHER_TOOL]}),
]


def load_templates():
    meta = json.load(open(os.path.join(FIXTURES, "templates.json"), encoding="utf-8"))
    out = {}
    for name in sorted(meta):
        with open(os.path.join(FIXTURES, "templates", name + ".jinja"), encoding="utf-8") as f:
            out[name] = (f.read(), meta[name])
    return out


def local_renderer():
    """A renderer configured as transformers 5's _cached_compile_jinja_template."""
    import jinja2
    import jinja2.ext
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(Extension):
        # {% generation %}...{% endgeneration %}: HF renders the body (and records its span when tracking).
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        @jinja2.pass_eval_context
        def _generation_support(self, context, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return PINNED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, messages, add_generation_prompt, kwargs):
        tools = kwargs.pop("tools", None)
        documents = kwargs.pop("documents", None)
        return env.from_string(template).render(
            messages=messages, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **kwargs
        )

    return render, "jinja2 " + jinja2.__version__


def hf_renderer():
    """transformers' own apply_chat_template on a tiny tokenizer per template, with the clock pinned."""
    import transformers
    import transformers.utils.chat_template_utils as ctu
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    class PinnedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return PINNED_NOW

    ctu.datetime = PinnedDatetime
    for fn in ("_compile_jinja_template", "_cached_compile_jinja_template"):
        if hasattr(getattr(ctu, fn, None), "cache_clear"):
            getattr(ctu, fn).cache_clear()
    tokenizers = {}

    def render(template, messages, add_generation_prompt, kwargs):
        bos, eos = kwargs.pop("bos_token"), kwargs.pop("eos_token")
        key = (template, bos, eos)
        if key not in tokenizers:
            vocab = {"[UNK]": 0, bos or "<bos>": 1, eos or "<eos>": 2}
            tok = PreTrainedTokenizerFast(
                tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")), unk_token="[UNK]",
                bos_token=bos or "<bos>", eos_token=eos or "<eos>")
            tok.chat_template = template
            tokenizers[key] = tok
        tok = tokenizers[key]
        # bos/eos reach the template from the tokenizer's special tokens, as for users; "" stands for none.
        kwargs = dict(kwargs)
        if not bos:
            kwargs["bos_token"] = ""
        if not eos:
            kwargs["eos_token"] = ""
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)

    return render, "transformers " + transformers.__version__ + " apply_chat_template"


def hf_render_jinja_renderer():
    """transformers.utils.chat_template_utils.render_jinja_template: the function apply_chat_template calls."""
    import transformers
    import transformers.utils.chat_template_utils as ctu

    hf_renderer()  # pins the clock

    def render(template, messages, add_generation_prompt, kwargs):
        rendered, _ = ctu.render_jinja_template(
            conversations=[messages], chat_template=template, add_generation_prompt=add_generation_prompt, **kwargs
        )
        return rendered[0]

    return render, "transformers " + transformers.__version__ + " render_jinja_template"


def make_goldens(render):
    goldens = []
    jobs = []
    for name, (template, meta) in load_templates().items():
        for case in CASES:
            for agp in (False, True):
                jobs.append((name, template, meta, case, agp, dict(CASE_KWARGS.get(case, {}))))
        for ename, case, kw in EXTRA:
            if ename == name:
                merged = dict(CASE_KWARGS.get(case, {}))
                merged.update(kw)
                jobs.append((name, template, meta, case, True, merged))
    for name, template, meta, case, agp, kwargs in jobs:
        full = dict(kwargs)
        full["bos_token"] = meta["bos_token"] or ""
        full["eos_token"] = meta["eos_token"] or ""
        record = {"template": name, "case": case, "add_generation_prompt": agp, "kwargs": kwargs}
        try:
            record["output"] = render(template, json.loads(json.dumps(CASES[case])), agp, dict(full))
        except Exception as e:  # the C++ side must fail as well
            record["error_type"] = type(e).__name__
            record["error"] = str(e)
        goldens.append(record)
    return goldens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", metavar="OUT", help="render with real transformers, write OUT")
    ap.add_argument("--hf-render", metavar="OUT", help="render with transformers' render_jinja_template, write OUT")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    ap.add_argument("--out", default=os.path.join(FIXTURES, "goldens.json"))
    args = ap.parse_args()
    if args.compare:
        a = json.load(open(args.compare[0], encoding="utf-8"))["goldens"]
        b = json.load(open(args.compare[1], encoding="utf-8"))["goldens"]
        diffs = 0
        for x, y in zip(a, b):
            if x.get("output") != y.get("output") or ("error" in x) != ("error" in y):
                diffs += 1
                print("DIFF", x["template"], x["case"], x["add_generation_prompt"], x["kwargs"])
                print("  A:", repr(x.get("output", x.get("error"))))
                print("  B:", repr(y.get("output", y.get("error"))))
        print(f"{len(a)} vs {len(b)} goldens, {diffs} differ")
        return 1 if diffs or len(a) != len(b) else 0
    if args.hf:
        render, version = hf_renderer()
    elif args.hf_render:
        render, version = hf_render_jinja_renderer()
    else:
        render, version = local_renderer()
    goldens = make_goldens(render)
    doc = {
        "made_by": "tools/reference/chat_template_goldens.py with " + version,
        "pinned_now": PINNED_NOW.isoformat(),
        "goldens": goldens,
    }
    out = args.hf or args.hf_render or args.out
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for g in goldens if "error" in g)
    print(f"{version}: {len(goldens)} renderings ({errors} errors) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
