"""U+0000 and the escape marker in every free-text column: recorded, verified
and read back identically on SQLite and on PostgreSQL (whose text type
refuses U+0000), with the escaped cells covered by the chain."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.contract import Message, ModelRequest, ToolCall
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Payload, Status, Timings, Usage
from store import Recorder, Store
from store.text_escape import MARK, escape, unescape
from tests.store.test_postgres import postgres_url  # noqa: F401 - the throwaway cluster

VARIANTS = {
    "nul alone": "\x00",
    "nul inside": "exit 1\nbinary\x00output\x00\x00end",
    "marker first": MARK + "looks escaped \\0",
    "marker and nul": MARK + "\\\x00\\\\0",
    "escape-like, no nul": "\\0 and \\\\ stay as they are",
    "trailing backslash and nul": "tail \\\x00\\",
}


@given(st.text(alphabet=st.sampled_from(["a", "\\", "0", "\x00", MARK, "é"]), max_size=12))
def test_escaping_round_trips_and_never_stores_nul(text: str) -> None:
    stored = escape(text)
    assert "\x00" not in stored
    assert unescape(stored) == text
    assert stored == text or stored.startswith(MARK)


@pytest.mark.parametrize("stored", [MARK + "plain", MARK + "a\\x", MARK + "a\\", MARK + "\\\\"])
def test_a_malformed_or_needless_escape_is_read_as_stored(stored: str) -> None:
    """Never guessed at: what is read is the cell itself, so its link breaks."""
    assert unescape(stored) == stored


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 'e.db'}"
    with Store.open(url) as opened:
        assert opened.dialect == request.param
        yield opened


def record(store: Store, text: str) -> str:
    """One turn with ``text`` in every free-text column the Recorder writes."""
    recorder = Recorder(store)
    run_id = recorder.start_run(task=f"task {text}", repo=f"/repo{text}", model="gemma-3-270m", config={}, policy={})
    call = ToolCall(id=f"c{text}", name=f"bash{text}", arguments=f"not json {text}")
    with recorder.turn(run_id, 0) as tx:
        call_id = tx.request(
            ModelRequest(model="gemma-3-270m", messages=(Message(role="user", content=text),), max_tokens=16)
        )
        tx.envelope(
            call_id,
            Envelope(
                status=Status.COMPLETED,
                payload=Payload(text=text, tool_calls=(call,), reasoning=text),
                http_status=200,
                usage=Usage(prompt_tokens=10, completion_tokens=2),
                timings=Timings(total_s=0.1),
                engine=f"llama.cpp{text}",
                model=f"served{text}",
                finish_reason="tool_calls",
                attempts=(
                    Attempt(
                        number=1,
                        status=Status.TRANSPORT_FAILURE,
                        error=ErrorDetail(kind="http_503", message=text),
                        duration_s=0.01,
                    ),
                    Attempt(number=2, status=Status.COMPLETED, duration_s=0.09),
                ),
            ),
        )
        candidate = tx.candidate(call_id, 0, call)
        tx.transition(candidate, None, "STAGED", f"staged {text}")
        tx.tool_execution(candidate, tool=call.name, arguments_json=call.arguments, decision="allow", rule="r",
                          reason=text, exit_code=1, stdout=text, stderr=text * 2, duration_s=0.1,
                          observation=f"observed {text}", ok=False, detail={"why": text})
        tx.event("note", {"text": text})
        tx.commit([Message(role="tool", content=text, tool_call_id=call.id)])
    recorder.finish_run(run_id, "FAULTED", f"detail {text}", turn=1)
    return run_id


@pytest.mark.parametrize("text", VARIANTS.values(), ids=VARIANTS.keys())
def test_text_round_trips_exactly_and_verifies(store: Store, text: str) -> None:
    run_id = record(store, text)
    assert store.verify(run_id).ok
    trajectory = store.trajectory(run_id)
    run = trajectory.run
    assert (run.task, run.verdict_detail) == (f"task {text}", f"detail {text}")
    turn = trajectory.turns[0]
    (execution,) = turn.tool_executions
    assert (execution.stdout, execution.stderr, execution.reason) == (text, text * 2, text)
    assert (execution.observation, execution.tool_name) == (f"observed {text}", f"bash{text}")
    (candidate,) = turn.candidates
    assert candidate.tool_name == f"bash{text}"
    assert [t.reason for t in candidate.transitions] == [f"staged {text}"]
    (call,) = turn.calls
    assert call.request().messages[0].content == text
    response = call.response
    assert response is not None
    assert (response.reasoning, response.engine, response.response_model) == (text, f"llama.cpp{text}", f"served{text}")
    assert [a.error_message for a in call.attempts] == [text, None]
    with store.read() as conn:  # no stored cell holds U+0000, whatever the backend
        for table, column, written in (
            ("tool_executions", "stdout", text),
            ("tool_executions", "gen_ai.tool.name", f"bash{text}"),
            ("model_responses", "reasoning", text),
            ("call_attempts", "error_message", text),
        ):
            (stored,) = raw(
                conn, f'SELECT "{column}" FROM {table} WHERE run_id = :r AND "{column}" IS NOT NULL', r=run_id
            )
            assert stored[0] == escape(written) and "\x00" not in stored[0]
        (task,) = raw(conn, "SELECT task FROM runs WHERE id = :r", r=run_id)
        assert "\x00" not in task[0]


def raw(conn, sql: str, **params: object) -> list:  # type: ignore[no-untyped-def]
    """Cells as stored: plain SQL, no column types, so no unescaping."""
    style = "?" if conn.dialect.name == "sqlite" else "%({})s"
    names = []
    for name in params:
        names.append(name)
    ordered = sorted(params, key=lambda n: sql.index(":" + n))
    for name in ordered:
        sql = sql.replace(":" + name, style.format(name))
    args = tuple(params[n] for n in ordered) if style == "?" else params
    return conn.exec_driver_sql(sql, args).all()


@pytest.mark.parametrize("tampered", [
    lambda stored: stored.replace("\\0", "\\\\", 1),  # one escape swapped for another
    lambda stored: stored[1:],  # the marker dropped: the escapes read as they are
    lambda stored: stored + "\\x",  # a malformed escape: read verbatim
], ids=["swapped escape", "marker dropped", "malformed"])
def test_a_change_to_an_escaped_cell_breaks_the_chain(store: Store, tampered) -> None:  # type: ignore[no-untyped-def]
    run_id = record(store, VARIANTS["nul inside"])
    with store.write() as conn:
        ((stored,),) = raw(conn, "SELECT stdout FROM tool_executions WHERE run_id = :r", r=run_id)
        assert stored.startswith(MARK) and "\x00" not in stored
        changed = tampered(stored)
        assert changed != stored
        raw_update = "UPDATE tool_executions SET stdout = :v WHERE run_id = :r"
        style = "?" if conn.dialect.name == "sqlite" else None
        conn.exec_driver_sql(raw_update.replace(":v", "?").replace(":r", "?") if style
                             else raw_update.replace(":v", "%(v)s").replace(":r", "%(r)s"),
                             (changed, run_id) if style else {"v": changed, "r": run_id})
    check = store.verify(run_id)
    assert not check.ok and check.table == "tool_executions", check
