"""Fixtures for report and export tests: real SQLite stores in tmp dirs,
filled through the store's Recorder, and an isolated ESCROW_HOME."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from orchestrator.contract import Message, ModelRequest, Sampling, ToolCall, ToolSpec
from orchestrator.envelope import Attempt, Envelope, Payload, Status, Timings, Usage
from store import Recorder, Store

TOOLS = (
    ToolSpec(
        name="bash",
        description="Run a command.",
        parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
    ),
    ToolSpec(
        name="read_file",
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ESCROW_HOME in a tmp dir; its store is ``home/escrow.db``."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("ESCROW_HOME", str(path))
    monkeypatch.delenv("ESCROW_DB_URL", raising=False)
    return path


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{home / 'escrow.db'}") as opened:
        yield opened


def envelope(
    prompt: int,
    cached: int,
    completion: int,
    *,
    status: Status = Status.COMPLETED,
    calls: tuple[ToolCall, ...] = (),
    ttft: float = 0.1,
    decode: float = 0.5,
    total: float = 0.7,
    retries: int = 0,
    model: str = "gemma-3-270m",
) -> Envelope:
    attempts = [
        Attempt(number=i + 1, status=Status.TRANSPORT_FAILURE, http_status=503, duration_s=0.01) for i in range(retries)
    ]
    # The attempts' HTTP time adds up to the call's duration (no backoff slept here).
    attempts.append(Attempt(number=retries + 1, status=status, http_status=200, duration_s=total - 0.01 * retries))
    return Envelope(
        status=status,
        payload=Payload(text="ok", tool_calls=calls),
        finish_reason="length" if status is Status.TRUNCATED else "tool_calls",
        http_status=200,
        usage=Usage(
            prompt_tokens=prompt,
            cached_prompt_tokens=cached,
            completion_tokens=completion,
            prompt_source="server",
            cached_source="server",
            completion_source="server",
        ),
        timings=Timings(ttft_s=ttft, decode_s=decode, total_s=total),
        model=model,
        attempts=tuple(attempts),
    )


class Turn:
    """One scripted turn: the call's usage, its tool calls and observations."""

    def __init__(self, prompt: int, cached: int, completion: int, *, tools: Sequence[tuple[str, str, str]] = (),
                 status: Status = Status.COMPLETED, tool_s: float = 0.25, retries: int = 0, stdout: str = "ok\n",
                 events: Sequence[tuple[str, dict[str, object]]] = (), model: str = "gemma-3-270m") -> None:
        self.prompt, self.cached, self.completion, self.tools = prompt, cached, completion, tools
        self.status, self.tool_s, self.retries, self.stdout, self.events, self.model = (
            status,
            tool_s,
            retries,
            stdout,
            events,
            model,
        )


def record(recorder: Recorder, turns: Sequence[Turn], *, verdict: str | None = "PASS", model: str = "gemma-3-270m",
           task: str = "make the tests pass", config: dict[str, object] | None = None) -> str:
    """Record a run turn by turn through the public Recorder API."""
    run_id = recorder.start_run(task=task, repo="/work/example", model=model, config=config or {"max_turns": 10},
                                policy={"approval": "auto"})
    history: list[Message] = [Message(role="user", content=task)]
    for number, spec in enumerate(turns):
        calls = tuple(
            ToolCall(id=f"c{number}_{i}", name=name, arguments=args) for i, (name, args, _) in enumerate(spec.tools)
        )
        with recorder.turn(run_id, number) as tx:
            request = ModelRequest(
                model=spec.model,
                messages=(Message(role="system", content="You fix code."), *history),
                tools=TOOLS,
                max_tokens=128,
                sampling=Sampling(temperature=0.0, seed=number),
            )
            call_id = tx.request(request)
            tx.envelope(call_id, envelope(spec.prompt, spec.cached, spec.completion, status=spec.status, calls=calls,
                                          retries=spec.retries, model=spec.model))
            appended = [Message(role="assistant", content=f"step {number}", tool_calls=calls)]
            for index, (call, (_, _, observation)) in enumerate(zip(calls, spec.tools, strict=True)):
                candidate = tx.candidate(call_id, index, call)
                tx.transition(candidate, None, "STAGED", "staged")
                tx.tool_execution(
                    candidate,
                    tool=call.name,
                    arguments_json=call.arguments,
                    decision="allow",
                    rule="tools",
                    reason="granted",
                    exit_code=0,
                    stdout=spec.stdout,
                    stderr="",
                    duration_s=spec.tool_s,
                    observation=observation,
                    ok=True,
                )
                appended.append(Message(role="tool", content=observation, tool_call_id=call.id))
            for kind, data in spec.events:
                tx.event(kind, data)
            tx.commit(appended)
        history.extend(appended)
    if verdict is not None:
        recorder.finish_run(run_id, verdict, "verifier", turn=len(turns))
    return run_id


GROWING = [
    Turn(1000, 0, 50, tools=[("bash", '{"cmd": "pytest -x"}', "1 failed")]),
    Turn(1200, 1000, 80, tools=[("read_file", '{"path": "src/app.py"}', "def f(): ...")], retries=1),
    Turn(1400, 1200, 60, tools=[("bash", '{"cmd": "pytest -x"}', "1 passed")]),
    Turn(1600, 0, 40),
]


class Scripted:
    """The helpers above, handed to tests as a fixture (test modules are not importable packages)."""

    Turn = Turn
    GROWING = GROWING
    TOOLS = TOOLS
    envelope = staticmethod(envelope)

    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = Recorder(store)

    def record(self, turns: Sequence[Turn], **kwargs: object) -> str:
        return record(self.recorder, turns, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def scripted(store: Store) -> Scripted:
    return Scripted(store)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's headless Chromium; CI installs it with `apt-get install -y chromium`."""
    import shutil

    from tests.conftest import require

    found = shutil.which("chromium")
    require(found is not None, "chromium, the headless browser for the HTML report test (apt-get install -y chromium)")
    return str(found)
