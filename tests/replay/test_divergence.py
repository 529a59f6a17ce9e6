"""The pure diff: which field paths differ, cause first, and a readable diff."""

from __future__ import annotations

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
