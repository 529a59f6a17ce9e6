"""The stream monitor: JSON-prefix automaton and the M_max bound."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.adapters.model_client.monitor import JsonPrefix, StreamMonitor
from orchestrator.adapters.model_client.normalize import Cause

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def accepts(text: str) -> bool:
    return JsonPrefix().feed(text)


@given(json_values, st.booleans(), st.data())
def test_every_prefix_of_valid_json_is_accepted_in_any_split(value, ascii_only, data):
    doc = json.dumps(value, ensure_ascii=ascii_only, indent=data.draw(st.sampled_from([None, 1])))
    cut = data.draw(st.integers(0, len(doc)))
    parser = JsonPrefix()
    assert parser.feed(doc[:cut]) and parser.feed(doc[cut:])
    assert parser.complete


@given(st.text(alphabet='{}[]":,0123456789.eE+-tfnrulsa \\', max_size=16))
def test_agrees_with_json_loads_on_complete_documents(text):
    try:
        json.loads(text)
        valid = True
    except ValueError:
        valid = False
    parser = JsonPrefix()
    fed = parser.feed(text)
    if valid:
        assert fed and parser.complete
    else:
        assert not parser.complete


@given(json_values)
def test_anything_after_a_complete_value_is_rejected(value):
    doc = json.dumps(value)
    assert not accepts(doc + " }") and not accepts(doc + ",1")


@pytest.mark.parametrize(
    "bad", ['{"a": 1}}', "{a", "[,]", "01", '{"a" 1', "tru e", '"\x01"', '{"a":1,}', "[1 2]", "-a", '"\\x"']
)
def test_invalid_prefixes(bad):
    assert not accepts(bad)


@pytest.mark.parametrize(
    "prefix", ["", "{", '{"a', '{"a":', "-", "1.", "1e", "1e+", '"\\u00', "[tr", '{"a": [1, {"b": nu']
)
def test_valid_but_incomplete_prefixes(prefix):
    parser = JsonPrefix()
    assert parser.feed(prefix) and not parser.complete


def test_failure_position_is_reported_across_feeds():
    parser = JsonPrefix()
    assert parser.feed('{"a": ')
    assert not parser.feed("1}}")
    assert parser.failed_at == 8
    assert not parser.feed("{}")  # once failed, stays failed


def test_monitor_trips_on_arguments_per_tool_call_index():
    monitor = StreamMonitor(10_000)
    assert monitor.arguments(0, '{"x": ') is None
    assert monitor.arguments(1, "[1, 2]") is None  # another call has its own parser
    trip = monitor.arguments(0, "1]")
    assert trip is not None and trip.cause is Cause.INVALID_JSON_PREFIX and "tool call 0" in trip.detail


def test_monitor_counts_utf8_bytes_against_m_max():
    monitor = StreamMonitor(10)
    assert monitor.content("ééééé") is None  # 10 bytes
    trip = monitor.other("!")
    assert trip is not None and trip.cause is Cause.PAYLOAD_TOO_LARGE and monitor.staged_bytes == 11


def test_plain_text_content_is_not_json_checked():
    assert StreamMonitor(100).content("}}} not json") is None
    assert StreamMonitor(100, json_content=True).content("}}} not json") is not None
