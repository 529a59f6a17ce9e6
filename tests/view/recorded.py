"""Real recorded runs for the viewer tests: the turn loop and ModelClient
against the fault server, recorded into SQLite (tests.replay.recording)."""

from __future__ import annotations

import difflib
import random
import sqlite3
from pathlib import Path

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.replay import ForkOverrides, Replayer
from store import Recorder, Store
from tests.replay.recording import BROKEN_MEAN, EXAMPLE_REPO, FIXED_MEAN, call, fixing_steps, record_memory_run, reply
from tests.replay.test_fork_memory import memory_tools_for

ASSISTANT_TEXT = "Let me look around before I touch anything."
XSS = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"


def denial_steps(text: str = ASSISTANT_TEXT) -> list:
    """Reads, a write the policy denies (.git/config), an edit, a pass."""
    return [
        reply(call("list_files", path="."), text=text),
        reply(call("write_file", path=".git/config", content="[core]\n"), call("read_file", path="calc.py")),
        reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)),
        reply(call("submit")),
    ]


def record_patch(store: Store, run_id: str) -> str:
    """The run's patch event, as `escrow run` records it from the sandbox."""
    source = (EXAMPLE_REPO / "calc.py").read_text()
    patched = source.replace(BROKEN_MEAN, FIXED_MEAN)
    text = "".join(difflib.unified_diff(source.splitlines(True), patched.splitlines(True), "a/calc.py", "b/calc.py"))
    Recorder(store).record_event(run_id, None, "patch", {"sha256": "-", "files": ["calc.py"], "text": text})
    return text


def record_denial_run(store: Store, server: FaultServer, *, task: str | None = None, text: str = ASSISTANT_TEXT) -> str:
    overrides = {"task": task} if task else {}
    run_id = record_memory_run(store, server, denial_steps(text), **overrides)
    record_patch(store, run_id)
    return run_id


def record_fork(store: Store, server: FaultServer) -> tuple[str, str]:
    """A run and a fork of it from turn 2 at another temperature: the fork
    replays turns 0-1 and diverges at turn 2's sampling."""
    parent = record_memory_run(store, server, fixing_steps())
    server.script([reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)), reply(call("submit"))])
    replayer = Replayer(store)
    with ModelClient(server.base_url) as client:
        report = replayer.fork(replayer.load(parent), 2, tools_for=memory_tools_for, live_model=client,
                               overrides=ForkOverrides(temperature=0.3))
    assert report.replay_run_id is not None
    return parent, report.replay_run_id


def tamper(db_path: Path, run_id: str) -> None:
    """Change one recorded observation with plain SQL: the chain breaks."""
    with sqlite3.connect(db_path) as conn:
        column = '"gen_ai.tool.call.result"'
        conn.execute(f"UPDATE tool_executions SET {column} = {column} || ' (edited)' WHERE run_id = ? "
                     "AND seq = (SELECT MIN(seq) FROM tool_executions WHERE run_id = ?)", (run_id, run_id))


REASONING = "The mean divides by one too many; check calc.py before editing."
TAIL = "[turns left: {left}; context tokens left: {tokens}]"


def record_reasoning_run(store: Store, *, turns: int = 3, reasoning: str = REASONING) -> str:
    """A run recorded through the Recorder whose answers carry separated
    reasoning (as an engine's ``reasoning_content`` deltas are recorded) and
    whose requests end with the volatile tail, as the context builds them."""
    from orchestrator.contract import Message, ToolCall
    from orchestrator.envelope import Envelope, Payload, Status, Usage
    from store.write import synthetic

    recorder = Recorder(store)
    run_id = synthetic.start(recorder, random.Random(7))
    history: list[Message] = [Message(role="user", content="fix mean()")]
    for turn in range(turns):
        tail = Message(role="user", content=TAIL.format(left=turns - turn, tokens=4000 - 100 * turn))
        call = ToolCall(id=f"call_{turn}", name="read_file", arguments='{"path": "calc.py"}')
        envelope = Envelope(
            status=Status.COMPLETED, finish_reason="tool_calls", http_status=200,
            payload=Payload(text=f"step {turn}", tool_calls=(call,), reasoning=f"{reasoning} (turn {turn})"),
            usage=Usage(prompt_tokens=50, completion_tokens=40, prompt_source="server", completion_source="server",
                        reasoning_tokens=30, reasoning_convention="excluded"),
        )
        appended = [Message(role="assistant", content=f"step {turn}", tool_calls=(call,)),
                    Message(role="tool", content=f"contents {turn}", tool_call_id=call.id)]
        with recorder.turn(run_id, turn) as tx:
            call_id = tx.request(synthetic.request_for(turn, [*history, tail]))
            tx.envelope(call_id, envelope)
            tx.commit(appended)
        history += appended
    recorder.finish_run(run_id, "PASS", "ok", turn=turns)
    return run_id
