"""A task file's templates render within bounds per row (tasks/sandbox.py): a template that loops for ever or
builds a huge value is one line naming the row and the bound, quickly and without the memory; real prompts
render as Jinja renders them."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st
from userfiles import FAST, GOOD_SPEC, write_spec

from softeval.errors import UserError
from softeval.tasks import sandbox
from softeval.tasks.custom import load_task_file
from softeval.tasks.sandbox import MAX_CHARS, BoundedSandbox, RenderBound, render

ENV = BoundedSandbox()


def refusal(tmp_path, prompt: str) -> str:
    path = write_spec(tmp_path, {**GOOD_SPEC, "prompt": prompt})
    with pytest.raises(UserError) as err:
        load_task_file(path).splits("offline")
    message = str(err.value)
    assert "\n" not in message and "rows.jsonl: row 0: the prompt template cannot be filled" in message
    return message


def test_two_nested_ranges_stop_at_the_time_bound_naming_the_row(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "RENDER_SECONDS", 0.2)  # the bound itself, smaller: the test takes no 2 s
    message = refusal(tmp_path, "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
                                "{{ country }}")
    assert "ran past 0.2 s, the bound on rendering one row" in message


def test_a_gigabyte_string_is_refused_before_it_is_built(tmp_path):
    tracemalloc.start()
    try:
        message = refusal(tmp_path, "{{ 'x' * 1000000000 }}{{ country }}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"past the bound of {MAX_CHARS:,} on one value" in message and peak < 100 * 2**20


@pytest.mark.parametrize("template", [
    "{{ 'x'.center(1000000000) }}", "{{ 'x'|center(1000000000) }}", "{{ '{:>999999999}'.format('x') }}",
    "{{ '%999999999s' % 'x' }}", "{{ '%999999999s'|format('x') }}", "{{ 10 ** 100000000 }}",
    "{{ ['x' * 100000] * 100000 }}", "{{ ('x' * 100000).replace('x', 'y' * 100000) }}",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% for i in range(100000) %}{% set s = 'x' * 1000000 %}{% endfor %}",
    "{% macro m(n) %}{% set s = 'x' * 1000000 %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
    "{{ ('x' * 1000000).translate({120: 'y' * 1000}) }}", "{{ ('x\n' * 500000)|indent('y' * 1000) }}",
    "{{ [1, 2]|slice(1000000000)|list }}", "{{ ('{0}' * 100000).format('y' * 1000) }}",
    "{% set big = 'x' * 1000000 %}{% set s %}{% for i in range(100000) %}{{ big }}{% endfor %}{% endset %}",
    "{% set big = 'x' * 1000000 %}{% macro m() %}{% for i in range(100000) %}{{ big }}{% endfor %}{% endmacro %}"
    "{{ m() }}",
    "{% set big = 'x' * 1000000 %}{{ [" + "big, " * 1000 + "]|string|length }}",
])
def test_each_way_to_build_a_huge_value_is_refused(template):
    with pytest.raises(RenderBound, match="the bound"):
        render(ENV.from_string(template), {})


def test_mutating_a_list_and_lipsum_are_not_there():
    with pytest.raises(Exception, match="unsafe|undefined"):
        render(ENV.from_string("{% set l = [] %}{{ l.append(1) }}"), {})
    with pytest.raises(Exception, match="lipsum"):
        render(ENV.from_string("{{ lipsum(1000000000) }}"), {})


def test_real_prompts_render_as_jinja_renders_them():
    from jinja2.sandbox import SandboxedEnvironment

    plain = SandboxedEnvironment(keep_trailing_newline=True)
    text = ("Q: {{ q }}{% for o in opts %}\n{{ loop.index }}/{{ loop.length }}. {{ o|upper }}{% endfor %}\n"
            "{{ '%05d' % n }} {{ '{:>5}'.format(q) }} {{ 'ab' * 3 }} {{ q|center(11) }} {{ opts|join(', ') }} "
            "{{ n ** 3 }} {{ (opts + ['z'])|length }} {{ q ~ '!' }}{% for x in tree recursive %}[{{ x.v }}"
            "{{ loop(x.kids) }}]{% endfor %}{{ ns.x if ns is defined else '' }}")
    values = {"q": "hi", "opts": ["a", "b"], "n": 12345678901,
              "tree": [{"v": 1, "kids": [{"v": 2, "kids": []}]}, {"v": 3, "kids": []}]}
    assert render(ENV.from_string(text), values) == plain.from_string(text).render(values)


@FAST
@given(st.text(max_size=5), st.integers(min_value=0, max_value=10**7))
def test_a_repetition_is_exact_or_refused(text, times):
    try:
        out = render(ENV.from_string("{{ s * n }}"), {"s": text, "n": times})
    except RenderBound:
        assert len(text) * times > MAX_CHARS
    else:
        assert out == text * times
