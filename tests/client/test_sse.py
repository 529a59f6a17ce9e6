"""The SSE parser: byte-safe, tolerant, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.adapters.model_client.sse import SSEError, SSEParser


def parse(*chunks: bytes) -> list[str]:
    parser = SSEParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)] + parser.close()
    return [e.data for e in events]


def test_basic_events_and_comments():
    assert parse(b": keep-alive\n\ndata: one\n\ndata:two\nevent: x\n\n") == ["one", "two"]


def test_multiline_data_is_joined():
    assert parse(b"data: a\ndata: b\n\n") == ["a\nb"]


@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"])
def test_all_line_endings(sep):
    assert parse(b"data: x" + sep + sep + b"data: y" + sep + sep) == ["x", "y"]


def test_crlf_split_across_reads_is_one_line_end():
    assert parse(b"data: x\r", b"\n\r", b"\ndata: y\r\n\r\n") == ["x", "y"]


def test_final_event_without_blank_line_is_delivered():
    assert parse(b"data: [DONE]\n") == ["[DONE]"]
    assert parse(b"data: [DONE]") == ["[DONE]"]


def test_multibyte_character_split_across_reads():
    raw = "data: é漢🙂\n\n".encode()
    for cut in range(len(raw)):
        assert parse(raw[:cut], raw[cut:]) == ["é漢🙂"]


def test_non_utf8_line_raises_with_kind():
    with pytest.raises(SSEError) as caught:
        parse(b"data: \xff\xfe\n\n")
    assert caught.value.kind == "non_utf8"


def test_unbounded_line_raises():
    parser = SSEParser(max_line_bytes=1000)
    parser.feed(b"data: " + b"x" * 900)
    with pytest.raises(SSEError) as caught:
        parser.feed(b"x" * 200)
    assert caught.value.kind == "line_too_long"


events = st.lists(
    st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30), max_size=8
)


@given(events, st.lists(st.integers(min_value=0, max_value=400), max_size=6), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_split_gives_the_same_events(datas, cuts, sep):
    raw = b"".join(b"data: " + d.encode() + sep + sep for d in datas)
    points = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert parse(*pieces) == [d for d in datas]
