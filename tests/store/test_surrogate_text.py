"""Lone surrogates (what ``surrogateescape`` makes of bytes that are not
UTF-8: a file name, a listing) in every free-text column and in JSON:
recorded, hashed into the chain, verified and read back identically on
SQLite and on PostgreSQL, where no driver could store them as they are."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.canonical import bytes_fields, canonical_bytes, canonical_json, recorded_bytes, sha256_hex
from store import Store
from store.text_escape import MARK, escape, unescape
from tests.store.test_nul_text import raw, record, store  # noqa: F401 - the two backends' fixture
from tests.store.test_postgres import postgres_url  # noqa: F401 - the throwaway cluster

VARIANTS = {
    "escaped byte": "caf\udcff.txt",
    "latin-1 read as bytes": "caf\udce9 cr\udce8me",
    "high surrogate": "\ud800 alone",
    "escape-looking text": "\\udcff is six characters",
    "marker, nul and surrogate": MARK + "\\\x00\udc80\\u",
}
ALPHABET = ["a", "\\", "u", "d", "0", "\x00", MARK, "\u00e9", "\udcff", "\udc80", "\ud800"]


@given(st.text(alphabet=st.sampled_from(ALPHABET), max_size=12))
def test_escaping_round_trips_and_stores_only_utf8(text: str) -> None:
    stored = escape(text)
    stored.encode("utf-8")  # what every driver can bind
    assert "\x00" not in stored and unescape(stored) == text
    assert stored == text or stored.startswith(MARK)


# No high surrogate before a low one: JSON reads such a pair as the one character it encodes.
@given(st.text(alphabet=st.sampled_from(["a", "\u00e9", "\udcff", "\udc80", '"', "\\"]), max_size=12)
       | st.sampled_from(["\ud800", "x\udbff", "\udfff\ud800"]))
def test_canonical_json_of_any_str_is_utf8_and_reads_back_equal(text: str) -> None:
    value = {"k": text, text: [text]}
    assert json.loads(canonical_bytes(value)) == value
    assert canonical_json(value) == canonical_json(json.loads(canonical_json(value)))


@given(st.binary(max_size=40))
def test_recorded_bytes_are_exact_and_utf8_stays_text(data: bytes) -> None:
    fields = json.loads(canonical_json(bytes_fields(data)))
    assert recorded_bytes(fields) == data
    try:
        assert fields == {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        assert set(fields) == {"text", "base64"}


def test_distinct_strs_hash_differently() -> None:
    """``surrogateescape``'s byte 0xff and U+DCFF's own three bytes, read as bytes, differ."""
    assert len({sha256_hex("\udcff"), sha256_hex("\udced\udcb3\udcbf"), sha256_hex("\\udcff")}) == 3


@pytest.mark.parametrize("text", VARIANTS.values(), ids=VARIANTS.keys())
def test_text_with_surrogates_round_trips_exactly_and_verifies(store: Store, text: str) -> None:  # noqa: F811
    run_id = record(store, text)
    assert store.verify(run_id).ok
    trajectory = store.trajectory(run_id)
    assert (trajectory.run.task, trajectory.run.repo) == (f"task {text}", f"/repo{text}")
    turn = trajectory.turns[0]
    (execution,) = turn.tool_executions
    assert (execution.stdout, execution.stderr, execution.reason) == (text, text * 2, text)
    assert execution.observation == f"observed {text}" and execution.observation_sha256 == sha256_hex(
        f"observed {text}")
    assert json.loads(execution.detail_json or "") == {"why": text}
    (call,) = turn.calls
    # Read with Python's json: pydantic's own JSON parser refuses a lone surrogate's escape.
    assert json.loads(call.request_json)["messages"][0]["content"] == text
    assert call.response is not None and call.response.reasoning == text
    (event,) = turn.events
    assert event.data == {"text": text}
    with store.read() as conn:  # every cell as stored is UTF-8 and reads back through the escape
        for column, written in (("stdout", text), ("gen_ai.tool.name", f"bash{text}")):
            ((stored,),) = raw(conn, f'SELECT "{column}" FROM tool_executions WHERE run_id = :r', r=run_id)
            stored.encode("utf-8")
            assert stored == escape(written) and unescape(stored) == written
