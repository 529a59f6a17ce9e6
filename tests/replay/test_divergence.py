"""The pure diff: which field paths differ, cause first, and a readable diff."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.replay import compare, differing_paths
from orchestrator.replay.divergence import value_at


def request(**changes):
    base = {
        "model": "m",
        "max_tokens": 8,
        "stream": True,
        "sampling": {"temperature": 0.0, "seed": 7},
        "tools": [
            {"name": "read_file", "description": "Read.", "parameters": {"properties": {"path": {"type": "string"}}}}
        ],
        "messages": [
            {"role": "system", "content": "be careful"},
            {"role": "user", "content": "fix it"},
            {"role": "user", "content": "[tokens left: 100]"},
        ],
    }
    base.update(changes)
    return base


def test_equal_values_have_no_paths():
    assert compare(request(), request()) == ((), "")


def test_settings_and_tools_are_named_before_the_messages_they_drag_along():
    changed = request(
        tools=[
            {"name": "read_file", "description": "Read!", "parameters": {"properties": {"path": {"type": "string"}}}}
        ],
        messages=[*request()["messages"][:2], {"role": "user", "content": "[tokens left: 99]"}],
    )
    paths, diff = compare(request(), changed)
    assert paths == ("tools[0].description", "messages[2].content")
    assert "first difference at character 4" in diff and '"Read."' in diff and '"Read!"' in diff


def test_sampling_nested_path_and_missing_keys():
    paths = differing_paths(request(), request(sampling={"temperature": 0.5}))
    assert paths == ["sampling.seed", "sampling.temperature"]


def test_list_length_and_odd_keys():
    a = {"messages": [1, 2], "x-y": 1}
    b = {"messages": [1, 2, 3], "x-y": 2}
    assert differing_paths(a, b) == ["messages[2]", '["x-y"]']
    assert value_at(b, "messages[2]") == 3 and value_at(b, '["x-y"]') == 2


def test_type_change_is_a_difference():
    assert differing_paths({"seed": 1}, {"seed": 1.0}) == ["seed"]
    assert differing_paths({"seed": True}, {"seed": 1}) == ["seed"]


def test_multiline_strings_get_a_line_diff():
    paths, diff = compare({"messages": [{"content": "a\nb\nc"}]}, {"messages": [{"content": "a\nB\nc"}]})
    assert paths == ("messages[0].content",)
    assert "-b\n" in diff and "+B\n" in diff


def test_the_equality_fast_path_agrees_with_the_walk_on_every_variant():
    # compare() answers "equal" without walking when identical() says so; a
    # wrong True would hide a divergence, so each pair is checked both ways.
    from orchestrator.replay.divergence import identical

    base = request()
    variants = [
        request(),
        dict(reversed(list(request().items()))),  # key order is not a difference
        request(max_tokens=8.0),
        request(stream=1),
        request(sampling={"temperature": 0, "seed": 7}),
        request(sampling={"temperature": 0.0, "seed": 7, "top_p": None}),
        request(sampling={"temperature": 0.0}),
        request(messages=request()["messages"][:2]),
        request(messages=[*request()["messages"], None]),
        request(messages=tuple(request()["messages"])),
        request(tools=[{**request()["tools"][0], "parameters": {"properties": {"path": {"type": "str"}}}}]),
        {**request(), "extra": None},
        [base],
        "m",
        None,
    ]
    for variant in variants:
        for a, b in ((base, variant), (variant, base)):
            walked = differing_paths(a, b, limit=1000)
            assert identical(a, b) is (walked == []), (a, b, walked)
            assert (compare(a, b)[0] == ()) is (walked == [])
    assert [identical(base, v) for v in variants].count(True) == 2


_LEAVES = st.one_of(st.none(), st.booleans(), st.sampled_from([0, 1, 2]), st.sampled_from([0.0, 1.0, -0.0]),
                    st.sampled_from(["", "a", "1"]))
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "x-y"]), inner,
                                                                          max_size=3)),
    max_leaves=8,
)


def _retyped(value):
    """The same value as Python's ``==`` sees it, with bools as ints and ints as floats."""
    if isinstance(value, dict):
        return {k: _retyped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_retyped(v) for v in value]
    if isinstance(value, bool):
        return int(value)
    return float(value) if isinstance(value, int) else value


@given(_VALUES, _VALUES)
@settings(max_examples=400, deadline=None)
def test_the_equality_fast_path_agrees_with_the_walk_on_random_json(a, b):
    from orchestrator.replay.divergence import identical

    for x, y in ((a, b), (a, a), (b, json.loads(json.dumps(b))), (a, _retyped(a))):
        assert identical(x, y) is (differing_paths(x, y, limit=1000) == [])
