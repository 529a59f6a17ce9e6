"""Synthetic trajectories with the shape of real ones, recorded through the
public Recorder API. Used by the crash, concurrency and tamper tests and by
bench/bench_store.py; seeded, so a run can be reproduced."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from orchestrator.contract import Message, ModelRequest, Sampling, ToolCall, ToolSpec
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Payload, Status, Timings, Usage
from store.write.recorder import Recorder

if TYPE_CHECKING:
    from store.store import Store

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


def start(recorder: Recorder, rng: random.Random, model: str = "gemma-3-270m",
          config: dict[str, Any] | None = None) -> str:
    return recorder.start_run(
        task=f"fix the failing test #{rng.randrange(1000)}", repo="/work/example", model=model,
        config={"max_turns": 20, "temperature": 0.0, **(config or {})},
        policy={"tools": ["bash", "read_file"], "approval": "auto"},
    )


def request_for(turn: int, history: list[Message], model: str = "gemma-3-270m") -> ModelRequest:
    return ModelRequest(
        model=model, messages=(Message(role="system", content="You fix code."), *history), tools=TOOLS,
        max_tokens=256, stop=("</done>",), sampling=Sampling(temperature=0.0, seed=turn),
    )


def envelope_for(rng: random.Random, turn: int, calls: tuple[ToolCall, ...]) -> Envelope:
    retried = rng.random() < 0.2
    attempts = (
        [
            Attempt(
                number=1,
                status=Status.TRANSPORT_FAILURE,
                http_status=503,
                error=ErrorDetail(kind="http_503", message="busy"),
                duration_s=0.01,
                backoff_s=0.5,
            )
        ]
        if retried
        else []
    )
    attempts.append(Attempt(number=len(attempts) + 1, status=Status.COMPLETED, http_status=200, duration_s=0.4))
    return Envelope(
        status=Status.COMPLETED,
        payload=Payload(text=f"turn {turn}", tool_calls=calls),
        finish_reason="tool_calls",
        http_status=200,
        usage=Usage(
            prompt_tokens=900 + 150 * turn,
            cached_prompt_tokens=750 + 150 * turn,
            completion_tokens=rng.randrange(20, 200),
            prompt_source="server",
            cached_source="server",
            completion_source="server",
        ),
        timings=Timings(ttft_s=0.05, decode_s=0.3, total_s=0.36),
        model="gemma-3-270m",
        engine="llama.cpp",
        attempts=tuple(attempts),
        payload_bytes=120,
    )


def record_turn(recorder: Recorder, run_id: str, turn: int, history: list[Message], rng: random.Random) -> None:
    """One complete turn: write-ahead request, then envelope, candidates with
    their escrow transitions, tool executions and an event in one transaction.
    Appends the turn's messages to ``history``."""
    with recorder.turn(run_id, turn) as tx:
        call_id = tx.request(request_for(turn, history))
        calls = tuple(
            ToolCall(id=f"call_{turn}_{i}", name="bash", arguments=f'{{"cmd": "pytest -k t{turn}_{i}"}}')
            for i in range(rng.randrange(1, 3))
        )
        tx.envelope(call_id, envelope_for(rng, turn, calls), cost_usd=0.0001 * (turn + 1))
        appended = [Message(role="assistant", content=f"turn {turn}", tool_calls=calls)]
        for index, call in enumerate(calls):
            candidate_id = tx.candidate(call_id, index, call)
            tx.transition(candidate_id, None, "STAGED", "released from model escrow")
            tx.transition(candidate_id, "STAGED", "VALIDATING", "parse, schema, policy")
            allowed = rng.random() < 0.8
            tx.transition(candidate_id, "VALIDATING", "COMMITTED" if allowed else "REJECTED", "policy", layer="policy")
            observation = f"exit 0\n{'.' * rng.randrange(1, 40)}" if allowed else "error (policy check): denied"
            tx.tool_execution(
                candidate_id, tool=call.name, arguments_json=call.arguments, decision="allow" if allowed else "deny",
                rule="tools.bash" if allowed else "paths.write", reason="granted" if allowed else "outside workspace",
                exit_code=0 if allowed else None, stdout="collected 3 items\n" * rng.randrange(1, 5) if allowed else "",
                stderr="", duration_s=0.2 if allowed else None, observation=observation, ok=allowed,
            )
            appended.append(Message(role="tool", content=observation, tool_call_id=call.id))
        tx.event("route", {"status": "COMPLETED", "action": "release"})
        tx.commit(appended)
    history.extend(appended)


def record_run(
    recorder: Recorder, *, turns: int = 3, seed: int = 1, finish: bool = True, model: str = "gemma-3-270m",
    config: dict[str, Any] | None = None,
) -> str:
    """A whole run of ``turns`` turns, closed with a PASS verdict when ``finish``."""
    rng = random.Random(seed)
    run_id = start(recorder, rng, model=model, config=config)
    history: list[Message] = []
    for turn in range(turns):
        record_turn(recorder, run_id, turn, history, rng)
    if finish:
        recorder.finish_run(run_id, "PASS", "the verifier passed", turn=turns)
    return run_id


MODELS = ("gemma-3-270m", "qwen3-0.6b", "llama-3.2-1b")
VERDICTS = ("PASS", "BUDGET_EXHAUSTED", "FAULTED", "REFUSED")


def record_many(store: "Store", runs: int, *, turns: int = 1, seed: int = 1, first_at: float = 1_700_000_000.0,
                spacing_s: float = 3600.0) -> list[str]:
    """``runs`` varied runs (model, verdict, task, start time and length vary
    with the seed), one every ``spacing_s`` seconds from ``first_at``; for
    browsing tests and benches. Returns the run ids, oldest first."""
    rng = random.Random(seed)
    moment = [first_at]
    recorder = Recorder(store, clock=lambda: moment[0])
    ids = []
    for index in range(runs):
        moment[0] = first_at + index * spacing_s
        model = MODELS[index % len(MODELS)]
        run_id = start(recorder, rng, model=model)
        history: list[Message] = []
        for turn in range(1 + rng.randrange(turns)):
            record_turn(recorder, run_id, turn, history, rng)
        recorder.finish_run(run_id, VERDICTS[rng.randrange(len(VERDICTS))], "generated", turn=turn + 1)
        ids.append(run_id)
    return ids

