#!/usr/bin/env python3
"""Renders each real chat template in tests/fixtures/chat_templates/templates/ over a fixed set of conversations,
the way HF transformers 5's apply_chat_template does, and writes the results as goldens for the C++ interpreter.

    python3 tools/reference/chat_template_goldens.py                 # local jinja2, writes goldens.json
    python3 tools/reference/chat_template_goldens.py --hf OUT.json   # the GPU host: real apply_chat_template
    python3 tools/reference/chat_template_goldens.py --hf-render OUT.json  # there: render_jinja_template
    python3 tools/reference/chat_template_goldens.py --compare A.json B.json
    python3 tools/reference/chat_template_goldens.py --odd-cases     # odd_cases.json (local jinja2), cases.json
    python3 tools/reference/chat_template_goldens.py --set extra     # goldens_extra.json (local jinja2)

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
    # templates_extra/
    ("llama3_1_tools", "tools", {"builtin_tools": ["brave_search", "wolfram_alpha"]}),
    ("llama3_1_tools", "tools", {"tools_in_user_message": False, "date_string": "01 Jan 2025"}),
    ("llama3_1_tools", "tools_first_turn", {"builtin_tools": ["code_interpreter"]}),
    ("firefunction_v2", "user_only", {"functions": json.dumps([WEATHER_TOOL["function"]])}),
    ("firefunction_v2", "multi_turn", {"functions": ""}),
    ("command_r", "user_only", {"documents": [{"title": "Doc", "text": "Body ü"}]}),
    ("command_r7b", "user_only", {"documents": [{"title": "Doc", "text": "Body ü"}]}),
    ("granite3_3", "user_only", {"documents": [{"doc_id": 1, "title": "Doc", "text": "Body"}], "thinking": True}),
    ("granite3_3", "tools", {"controls": {"citations": True, "length": "short"}}),
    ("deepseek_r1_0528", "reasoning", {}),
    ("qwq", "tools", {}),
]

# Small templates for single features, rendered by the local jinja2 configured as transformers 5 (--odd-cases).
# Each is (template, variables); messages/tools/add_generation_prompt go where HF puts them, the rest are extra
# keyword arguments. bos_token/eos_token are "<s>"/"</s>".
MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
ODD_CASES = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ("a  {%- if true %} b {% endif -%}  c", {}),
    ("line1\n  {% if true %}\n    x\n  {% endif %}\nline2", {}),
    ("  {%+ if true %}kept{% endif %}", {}),
    ("{% if true +%}\nkept newline{% endif %}", {}),
    ("a {# comment #}\nb", {}),
    ("a\n  {# comment #}\nb", {}),
    ("x {{- ' y ' -}} z", {}),
    ("{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("{% raw %}{{ not rendered }}{% endraw %}", {}),
    ("a\r\nb\rc", {}),
    ("{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("{%- for m in messages -%}\n[{{ m.role }}]\n{%- endfor -%}\n", {"messages": MSGS}),
    ("\t\t{% if true %}tab{% endif %}", {}),
    ("text {% if true %}\nyes{% endif %}", {}),
    # loops
    ("{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}", {"messages": MSGS}),
    ("{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.content }}({{ loop.length }}){% endfor %}", {"messages": MSGS}),
    ("{% for x in [] %}never{% else %}empty{% endfor %}", {}),
    ("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}", {}),
    ("{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("{% for c in 'héllo' %}{{ c }}|{% endfor %}", {}),
    ("{% for x in [1,2,3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", {}),
    ("{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% for x in undefined_thing %}x{% else %}none{% endfor %}", {}),
    ("{% for m in messages[::-1] %}{{ m.role }} {% endfor %}", {"messages": MSGS}),
    ("{% for m in messages|reverse %}{{ m.role }} {% endfor %}", {"messages": MSGS}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{% for a, b in [[1, 2], [3]] %}{{ a }}{% endfor %}", {}),
    # scoping and set
    ("{% for i in range(3) %}{% if i == 0 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(count=0, found=false) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}", {"messages": MSGS}),
    ("{% if true %}{% set y = 2 %}{% endif %}{{ y }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("{% set t = 1, 2 %}{{ t }}", {}),
    ("{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]", {}),
    ("{% set block | trim | upper %}  inner  {% endset %}[{{ block }}]", {}),
    ("{% set ns = namespace() %}{% set ns.a = [1] %}{{ ns.a }} {{ ns }}", {}),
    ("{% set x = 5 %}{% set x.y = 1 %}", {}),
    ("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    # macros
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", {}),
    ("{% set y = 5 %}{% macro m(a) %}{{ a }}{{ y }}{% endmacro %}{% set y = 6 %}{{ m(1) }}", {}),
    ("{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", {}),
    ("{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}", {}),
    ("{% macro m() %}{% set inner = 1 %}{% endmacro %}{{ m() }}{{ inner is defined }}", {}),
    # if / elif / conditional expressions
    ("{% if x %}a{% elif y %}b{% else %}c{% endif %}", {"y": 1}),
    ("{{ 'yes' if x else 'no' }} {{ 'only' if true }}|{{ 'only' if false }}|", {}),
    ("{{ 1 if false else 2 if false else 3 }}", {}),
    # literals and printing
    ("{{ [1, 'a', none, true, 1.0, {'k': (1,)}] }}", {}),
    ("{{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 1.5e-7 }} {{ 0.0001 }} {{ 100.0 }} {{ -0.0 }} {{ 2.5e-5 }}", {}),
    ("{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", {}),
    ("{{ 'it''s' }} {{ \"it's\" }} {{ ['it\\'s', 'a\"b', 'both\\'\"'] }}", {}),
    ("{{ 'tab\\there' }} {{ 'nl\\nhere' }} {{ ['\\n', '\\t', '\\x00', '\\u00e9', '\\u2028'] }}", {}),
    ("{{ 'a' 'b' \"c\" }}", {}),
    ("{{ 1_000 }} {{ 0x1f }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }}", {}),
    ("{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }}", {}),
    ("{{ {'a': 1, 'b': [1, 2]} }}", {}),
    ("{{ messages }}", {"messages": [{"role": "user", "content": "x"}]}),
    ("{{ undefined_var }}|{{ undefined_var.attr }}", {}),
    ("{{ d.missing }}|{{ d['missing'] }}|{{ l[10] }}|", {"d": {"a": 1}, "l": [1]}),
    ("{{ d.missing.deeper }}", {"d": {"a": 1}}),
    ("{{ l[10].x }}", {"l": [1]}),
    ("{{ n.x }}", {"n": None}),
    ("{{ 'str'.nope }}", {}),
    ("{{ d.a }} {{ d['a'] }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}", {"d": {"a": 1}}),
    # (`{{ d.items }}` prints a bound method's repr with an address in Python: not comparable)
    ("{{ d['items'] }}", {"d": {"items": 1}}),
    ("{{ l.0 }}{{ l[-1] }}{{ l[1:] }}{{ l[:-1] }}{{ l[::2] }}{{ l[::-1] }}{{ l[5:] }}{{ l[-10:2] }}", {"l": [1, 2, 3, 4]}),
    ("{{ 'héllo wörld'[1:4] }} {{ 'abc'[-1] }} {{ 'abc'[::-1] }} {{ 'abc'[10] }}|", {}),
    ("{{ l[::0] }}", {"l": [1]}),
    # operators
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}", {}),
    ("{{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 1 + 1.0 }} {{ true + 1 }} {{ 3 * 'ab' }} {{ 'ab' * 0 }} {{ [1] * 3 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ [1] }}", {}),
    ("{{ 'a' + 'b' ~ 'c' + 'd' }}", {}),
    ("{{ 1 + 2 ~ 3 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ [1] + (2,) }}", {}),
    ("{{ x + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 1 // 0 }}", {}),
    ("{{ -x }}", {"x": 3}),
    ("{{ -'a' }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1] == (1,) }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{{ x == y }} {{ x != 1 }}", {}),
    ("{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'k' in undefined_thing }}", {}),
    ("{{ 1 in 'abc' }}", {}),
    ("{{ 'a' in none }}", {}),
    ("{{ not true }} {{ not 0 }} {{ not '' }} {{ not [] }} {{ not x }}", {}),
    ("{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ '' and 'b' }}| {{ none or [] }}", {}),
    ("{{ not x is defined }} {{ x is not defined }} {{ 1 + 1 is number }}", {}),
    ("{{ -1 | abs }} {{ -(1 | abs) }}", {}),
    # tests
    ("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }}", {}),
    ("{{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ x is iterable }} {{ {} is sequence }} {{ 'a' is sequence }} {{ 1 is sequence }}", {}),
    ("{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is integer }} {{ 1.0 is float }}", {}),
    ("{{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}", {}),
    ("{{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is eq 'a' }} {{ 1 is equalto 2 }} {{ 1 is in [1] }} {{ 2 is gt 1 }} {{ 1 is ne 1 }}", {}),
    ("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ none is sameas none }} {{ true is sameas true }}", {}),
    ("{{ raise_exception is callable }} {{ 'a' is callable }}", {}),
    ("{{ x is odd }}", {}),
    # filters
    ("[{{ '  a b  ' | trim }}] [{{ 'xxhixx' | trim('x') }}] [{{ x | trim }}]", {}),
    ("{{ 'abc' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }} {{ x | length }} {{ 'héllo' | count }}", {}),
    ("{{ 3 | length }}", {}),
    ("{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('z', true) }} {{ x | default }}|", {}),
    ("{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }} {{ messages | join('|', attribute='role') }}", {"messages": MSGS}),
    ("{{ 'hello World' | upper }} {{ 'Hello' | lower }} {{ 'hELLO wORLD' | capitalize }} {{ 'hello-world foo(bar [x' | title }} {{ 'they\\'re bill\\'s' | title }}", {}),
    ("{{ 'aXbXc' | replace('X', '-') }} {{ 'aXbXc' | replace('X', '-', 1) }} {{ 'ab' | replace('', '.') }}", {}),
    ("{{ messages | selectattr('role', 'equalto', 'user') | list }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | list }}", {"messages": MSGS}),
    ("{{ messages | selectattr('missing') | list }} {{ messages | map(attribute='missing', default='D') | list }} {{ messages | map(attribute='role') | first }}", {"messages": MSGS}),
    ("{{ [1, 0, 2, none] | select | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3] | reject('even') | list }} {{ ['a', 'B'] | map('upper') | list }}", {}),
    ("{{ [3, 1, 2] | list }} {{ 'ab' | list }} {{ {'a': 1} | list }} {{ [1, 2] | first }} {{ [1, 2] | last }} {{ [] | first }}|", {}),
    ("{{ {'a': 1, 'b': 2} | items | list }} {{ x | items | list }} {{ {'b': 1, 'A': 2, 'a': 3} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }}", {}),
    ("{{ 42 | string }} {{ [1] | string }} {{ '3' | int + 1 }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ ' 12 ' | int }} {{ '0x1A' | int(0, 16) }} {{ '1_000' | int }}", {}),
    ("{{ '3.5' | float }} {{ 'x' | float }} {{ 2 | float }} {{ ' 1e3 ' | float }} {{ 'inf' | float }}", {}),
    ("{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 3 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }}", {}),
    ("{{ 'x' | safe }} {{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | list }}", {"messages": MSGS}),
    ("{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ [1, 2, 1] | unique | list }} {{ [3, 1, 2] | max }} {{ [3, 1, 2] | min }} {{ [1, 2, 3] | sum }} {{ messages | map(attribute='content') | map('length') | sum }}", {"messages": MSGS}),
    ("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ') }}", {}),
    ("{{ 'one two  three' | wordcount }} {{ '<a href=\"x\">&' | e }} {{ 'ab' | reverse }} {{ [1, 2] | reverse | list }}", {}),
    ("{{ x | upper }}|{{ x | join }}|{{ x | list }}", {}),
    ("{{ 'a' | nosuchfilter }}", {}),
    ("{{ 'a' is nosuchtest }}", {}),
    # tojson (HF's)
    ("{{ {'b': 1, 'a': [1.0, 2.5, none, true, 'é\"\\\\/\\n\\t\\u0001']} | tojson }}", {}),
    ("{{ {'b': 1, 'a': {'c': []}} | tojson(indent=2) }}", {}),
    ("{{ {'b': 1, 'a': {}} | tojson(indent=2, sort_keys=true) }}", {}),
    ("{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }} {{ 'é😀' | tojson(ensure_ascii=true) }} {{ [1, [2]] | tojson(indent=0) }}", {}),
    ("{{ tools | tojson }}", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}]}),
    ("{{ 1e20 | tojson }} {{ 0.5 | tojson }} {{ 10 | tojson }} {{ (1, 2) | tojson }} {{ '<b>' | tojson }} {{ \"'\" | tojson }}", {}),
    ("{{ x | tojson }}", {}),
    ("{{ [1, {'a': {}}] | tojson(indent='\\t') }}", {}),
    # string methods
    ("{{ '  a  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a\\n\\n'.rstrip() }}|{{ 'abcba'.rstrip('ab') }}", {}),
    ("{{ 'Hello'.startswith('He') }} {{ 'Hello'.startswith(('x', 'H')) }} {{ 'Hello'.endswith('lo') }} {{ 'Hello'.endswith('x') }} {{ 'Hello'.startswith('l', 2) }}", {}),
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(None, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a b c'.rsplit(None, 1) }} {{ ''.split() }} {{ ''.split(',') }}", {}),
    ("{{ '<think>x</think>\\n\\nanswer'.split('</think>')[-1].lstrip('\\n') }} {{ 'abc'.split('</think>')[0] }}", {}),
    ("{{ 'hello world'.title() }} {{ \"they're\".title() }} {{ 'ab1cd'.title() }} {{ 'ABC'.lower() }} {{ 'abc'.upper() }} {{ 'aBC dEF'.capitalize() }}", {}),
    ("{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.find('c') }} {{ 'abc'.find('z') }} {{ 'abcabc'.rfind('b') }} {{ 'abcabc'.count('b') }} {{ 'a'.count('') }} {{ 'héllo'.find('l') }}", {}),
    ("{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}{name}'.format('a', name='n') }} {{ '{{}}'.format() }}", {}),
    ("{{ '-'.join([1, 2]) }}", {}),
    ("{{ 'a\\nb\\r\\nc'.splitlines() }} {{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }} {{ ''.isdigit() }}", {}),
    ("{{ 'a'.split('') }}", {}),
    ("{{ ' a b c '.split(None, 1) }} {{ ' a b c '.rsplit(None, 1) }} {{ 'a b'.split(None, 0) }} {{ 'a,b'.split(',', 0) }}", {}),
    ("{{ '1 2' | int }} {{ '+7' | int }} {{ ' -3 ' | int }} {{ '1__0' | int }} {{ '1e3' | int }} {{ '12abc' | int(-1) }}", {}),
    ("{{ messages.append(1) }}", {"messages": []}),
    ("{{ messages.append }}|", {"messages": []}),
    ("{{ d.update({}) }}", {"d": {}}),
    ("{{ [1, 2, 2].count(2) }} {{ [1, 2].index(2) }} {{ {'a': 1}.keys() | list }} {{ {'a': 1}.values() | list }} {{ {'a': 1}.items() | list }}", {}),
    # globals
    ("{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}", {}),
    ("{{ range(100001) | length }}", {}),
    ("{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("{{ raise_exception('Custom failure: ' ~ 42) }}", {}),
    ("before{{ raise_exception('stop here') }}after", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M %d %b %Y %A') }}", {}),
    ("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}{{ tools }}{{ documents }}", {}),
    ("{{ custom_kwarg }} {{ enable_thinking is defined and enable_thinking is false }}", {"custom_kwarg": [1, "x"], "enable_thinking": False}),
    ("{{ unknown() }}", {}),
    ("{{ 'abc'() }}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("{% filter upper %}shout {{ 'x' }}{% endfilter %}", {}),
    ("{{ messages[0]['content'] is defined }} {{ messages[0]['nokey'] is defined }} {{ messages[0].nokey }}|", {"messages": MSGS}),
    ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{{ loop_messages | length }}", {"messages": MSGS}),
    # found by tools/reference/chat_template_differential.py
    ("{{ [1] is lower }} {{ 'A1' is upper }} {{ x is callable }} {{ 2.5 is odd }} {{ 3.0 is odd }} {{ 'abc' % {} }} {{ 'abc' % [] }} {{ d[] }}|", {"d": {}}),
    ("{{ x | abs }}", {}),
    ("{{ x | round }}", {}),
    ("{{ x | round(1, 'floor') }}", {}),
    ("{{ x | float }}", {}),
    ("{{ 'a' is odd }}", {}),
    ("{{ 'abc' % 2 }}", {}),
    ("{{ 5 | indent }}", {}),
    ("{{ (1, 2) | indent }}", {}),
    ("{{ 5 | last }}", {}),
    ("{{ 5 | reverse }}", {}),
    ("{{ i[1:] }}", {"i": 5}),
    ("{{ d[1:] }}", {"d": {}}),
    ("{{ f / 0 }}", {"f": 1.5}),
    ("{{ [1, 'a'] | max }}", {}),
    ("{{ i | dictsort }}", {"i": 5}),
    ("{{ [1] * 'a' }}", {}),
    ("{{ (1, x) }} {{ [x] }}", {}),
    ("{{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.keys() is sequence }} {{ d.keys()[0] }}| {{ 'a' in d.keys() }} {{ d.keys() == ['a'] }} {{ d.items() | list }}", {"d": {"a": 1}}),
    ("{{ d.keys() | tojson }}", {"d": {"a": 1}}),
    ("{{ d.keys() + ['b'] }}", {"d": {"a": 1}}),
    ("{{ 2 // 0.1 }} {{ 2 % 0.1 }} {{ -2 // 0.3 }} {{ 7.5 // -2 }} {{ -0.0 // 1 }}", {}),
    ("{% set b %}{% set x = 1 %}{% endset %}[{{ x }}] {% filter upper %}{% set y = 1 %}{% endfilter %}[{{ y }}] {% generation %}{% set z = 1 %}{% endgeneration %}[{{ z }}]", {}),
    ("{% for i in [] %}{% else %}{% set w = 1 %}{% endfor %}[{{ w }}] {% set v = 1 %}{% generation %}{{ v }}{% set v = 2 %}{{ v }}{% endgeneration %}{{ v }}", {}),
    ("{% for i in [1, 2] %}{% macro m() %}{{ i }}/{{ loop.index }}{% endmacro %}{{ m() }} {% endfor %}", {}),
    ("{% for i in [1] %}{% generation %}{% break %}{% endgeneration %}{% endfor %}", {}),
    ("{{ 'straße ﬁne ŉ'.upper() }} {{ 'İSTANBUL'.lower() }} {{ 'ΟΔΟΣ ΣΑΣ Σ'.lower() }} {{ 'ﬁne ßtraße'.title() }} {{ 'ßa'.capitalize() }} {{ 'ǆemal'.title() }}", {}),
    ("{{ 'straße ﬁne' | upper }} {{ 'ΟΔΟΣ' | lower }} {{ 'ßa ﬁx-ǆ' | title }} {{ 'ßa' | capitalize }} {{ ['ΣΑΣ', 'Ab'] | sort }} {{ 'ÀÉ' is upper }} {{ 'ǅ'.isupper() }} {{ 'ǅ' is lower }}", {}),
    # syntax errors (the message differs from jinja2's; the failure must agree)
    ("{% if x %}unclosed", {}),
    ("{% for x in y %}{% endif %}", {}),
    ("{{ 1 + }}", {}),
    ("{% endfor %}", {}),
    ("{% nosuchtag %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{# unclosed comment", {}),
    ("{{ (1, 2 }}", {}),
    ("{% break %}", {}),
    ("{{ a.b.}}", {}),
    ("{% set %}", {}),
    ("{% macro m( %}{% endmacro %}", {}),
    ("{{ x | }}", {}),
    ("{{ }}", {}),
]


def load_templates(template_set=""):
    """The fixture templates: "" is templates/ (+ templates.json), "extra" is templates_extra/."""
    suffix = "_" + template_set if template_set else ""
    meta = json.load(open(os.path.join(FIXTURES, "templates" + suffix + ".json"), encoding="utf-8"))
    out = {}
    for name in sorted(meta):
        with open(os.path.join(FIXTURES, "templates" + suffix, name + ".jinja"), encoding="utf-8") as f:
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


def make_odd_cases():
    import jinja2

    render, version = local_renderer()
    out = []
    for template, variables in ODD_CASES:
        kwargs = {"bos_token": "<s>", "eos_token": "</s>"}
        kwargs.update({k: v for k, v in variables.items() if k not in ("messages", "add_generation_prompt")})
        record = {"template": template, "vars": variables}
        try:
            record["output"] = render(template, variables.get("messages", []), variables.get("add_generation_prompt", False), kwargs)
        except Exception as e:
            kind = type(e).__name__
            # Compile-time failures: jinja2's TemplateAssertionError (unknown filter/test) and Python's
            # SyntaxError ({% break %} outside a loop) are TemplateSyntaxError for us.
            record["error_type"] = "TemplateSyntaxError" if kind in ("TemplateAssertionError", "SyntaxError") else kind
            record["error"] = str(e)
        out.append(record)
    return out, version


def make_goldens(render, template_set=""):
    goldens = []
    jobs = []
    for name, (template, meta) in load_templates(template_set).items():
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
    ap.add_argument("--odd-cases", action="store_true", help="write odd_cases.json (local jinja2) and cases.json")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    ap.add_argument("--set", default="", help='"extra": the templates in templates_extra/ (default: templates/)')
    ap.add_argument("--out", help="default: goldens.json, or goldens_extra.json for --set extra")
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
    if args.odd_cases:
        cases, version = make_odd_cases()
        with open(os.path.join(FIXTURES, "odd_cases.json"), "w", encoding="utf-8") as f:
            json.dump({"made_by": "tools/reference/chat_template_goldens.py --odd-cases with " + version,
                       "pinned_now": PINNED_NOW.isoformat(), "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        with open(os.path.join(FIXTURES, "cases.json"), "w", encoding="utf-8") as f:
            json.dump(CASES, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{version}: {len(cases)} odd cases ({sum('error' in c for c in cases)} errors), cases.json")
        return 0
    if args.hf:
        render, version = hf_renderer()
    elif args.hf_render:
        render, version = hf_render_jinja_renderer()
    else:
        render, version = local_renderer()
    goldens = make_goldens(render, args.set)
    doc = {
        "made_by": "tools/reference/chat_template_goldens.py with " + version,
        "pinned_now": PINNED_NOW.isoformat(),
        "goldens": goldens,
    }
    out = args.hf or args.hf_render or args.out or os.path.join(
        FIXTURES, "goldens" + ("_" + args.set if args.set else "") + ".json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for g in goldens if "error" in g)
    print(f"{version}: {len(goldens)} renderings ({errors} errors) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
