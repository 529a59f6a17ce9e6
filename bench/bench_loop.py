"""Orchestrator overhead per turn: everything a turn spends outside the model
and the tool, as a share of the turn's wall time.

A live loop (the same RunSpec, context, perimeter, SQLite journal and Docker
sandbox as ``escrow run``) runs N turns against the fault-injection server,
which streams a ~100-token reply with one cheap tool call (read_file) per turn
at a realistic decode rate. The fault server runs as a separate process so its
pacing does not share this process's GIL. Per turn:

- model time = the envelope's own ``timings.total_s``;
- tool time  = ``ToolOutcome.duration_s`` (the exec inside the container);
- overhead   = turn wall time - model - tool, broken out into recording
  (journal calls), client wrapping (call wall - envelope total), sandbox
  adapter (execute wall - duration_s) and the rest (context, perimeter, loop).

A bare ``docker exec true`` in the same sandbox, timed between turns, is
the baseline a turn is compared with (``--tokens 1 --tokens-per-s 1e6``
makes the model near instant).

Each runtime (``--runtimes``, default runc and runsc) gets its own run, one
after the other in the same process; the table prints them side by side,
with the ratio runsc/runc (``--json``: one object per runtime).

    .venv/bin/python bench/bench_loop.py [--turns 30] [--tokens-per-s 50] [--tool read_file|bash]
        [--runtimes runc,runsc] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import docker

from orchestrator.adapters.fault_server import Reply, Script, ScriptedToolCall
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.agent import Agent
from orchestrator.context import TiktokenCounter
from orchestrator.envelope import Envelope
from orchestrator.perimeter import acl_of
from orchestrator.ports import ToolOutcome
from orchestrator.runspec import RunSpec, build_agent
from orchestrator.settings import DEFAULT_SANDBOX_IMAGE
from orchestrator.toolset import tool_specs
from policies import default_policy
from sandbox import Sandbox, ToolBox, connect, require_image
from sandbox.loop_tools import SandboxTools
from sandbox.runtime import RuntimeName
from store import Recorder, RunJournal, Store

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calculator"
IMAGE = DEFAULT_SANDBOX_IMAGE


class Clock:
    """Seconds spent inside the wrapped calls, by bucket, for the current turn."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)

    def timed(self, bucket: str, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[bucket] += time.perf_counter() - start

        return wrapper


class TimedJournal:
    """The journal with every method timed as "recording"."""

    def __init__(self, journal: RunJournal, clock: Clock) -> None:
        self._journal, self._clock = journal, clock

    def __getattr__(self, name: str):
        return self._clock.timed("recording", getattr(self._journal, name))


class TimedModel:
    def __init__(self, client: ModelClient, clock: Clock) -> None:
        self.envelopes: list[Envelope] = []
        self._call = clock.timed("model", client.call)

    def call(self, request, *, cancel=None):
        envelope = self._call(request, cancel=cancel)
        self.envelopes.append(envelope)
        return envelope


class TimedTools:
    """Times only ``execute``: the ACL decision is orchestrator work (the loop's)."""

    def __init__(self, tools: SandboxTools, clock: Clock) -> None:
        self.outcomes: list[ToolOutcome] = []
        self._execute = clock.timed("tools", tools.execute)
        self.specs, self.arg_models = tools.specs, tools.arg_models

    def execute(self, name, args, *, time_left_s=None):
        outcome = self._execute(name, args, time_left_s=time_left_s)
        self.outcomes.append(outcome)
        return outcome


TOOL_CALLS = {"read_file": {"path": "calc.py"}, "bash": {"command": "true"}}


def reply(tokens: int, tokens_per_s: float, tool: str) -> Reply:
    args = json.dumps(TOOL_CALLS[tool])
    text_chunks = max(0, tokens - len(args) // 4 - 1)
    text = "I will read calc.py again to check the divisor in mean(). " * 8
    return Reply(text=text[: text_chunks * 4], tool_calls=(ScriptedToolCall(name=tool, arguments=args),),
                 chunk_chars=4, tokens_per_s=tokens_per_s)


def bare_docker_exec_s(container_id: str, n: int) -> float:
    """Median of ``docker exec -u 1000 CONTAINER true``: the baseline a turn is compared with."""
    samples = []
    for _ in range(n + 1):
        start = time.perf_counter()
        subprocess.run(["docker", "exec", "-u", "1000:1000", container_id, "true"], check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples[1:])


def start_server(step: Reply) -> tuple[subprocess.Popen, str]:
    script = Path(tempfile.mkdtemp()) / "script.json"
    script.write_text(Script(steps=(step,), cycle=True).model_dump_json())
    escrow = str(Path(sys.executable).with_name("escrow"))
    proc = subprocess.Popen([escrow, "fault-server", "--script", str(script), "--port", "0", "--json",
                             "--model", "bench-model"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())["base_url"]


class LiveLoop(NamedTuple):
    """One run's live loop, as ``live_loop`` yields it."""

    agent: Agent
    tools: "TimedTools"
    model: "TimedModel"
    sandbox: Sandbox
    run_id: str


@contextmanager
def live_loop(docker_client: docker.DockerClient, store: Store, url: str, turns: int,
              clock: Clock, runtime: RuntimeName = "runc") -> Iterator[LiveLoop]:
    """One run's live loop (its own sandbox, client and recorder)."""
    policy = default_policy()
    policy = policy.model_copy(update={"limits": policy.limits.model_copy(update={"max_turns": turns + 1})})
    recorder = Recorder(store)
    run_id = recorder.start_run(task="bench", repo=str(EXAMPLE), model="bench-model", policy={}, config={})
    spec = RunSpec(task="Fix mean() in calc.py.", verifier="python3 -m pytest -q", tool_specs=tool_specs(),
                   model="bench-model", s_max=131072, k_max=512, limits=policy.limits)
    with Sandbox.start(docker_client, IMAGE, policy, EXAMPLE, run_id=run_id,
                       runtime=runtime) as sandbox, ModelClient(url) as client:
        tools = TimedTools(SandboxTools(ToolBox(sandbox, policy, verifier_command=spec.verifier), policy), clock)
        model = TimedModel(client, clock)
        agent = build_agent(spec, counter=TiktokenCounter("cl100k_base"), model=model, tools=tools,
                            acl=acl_of(policy), journal=TimedJournal(RunJournal(recorder, run_id), clock))
        yield LiveLoop(agent, tools, model, sandbox, run_id)


def timed_step(agent: Agent, tools: TimedTools, model: TimedModel) -> tuple[float, Envelope, float]:
    """One turn: its wall time, its envelope, and the tool time inside it."""
    tools.outcomes.clear()
    model.envelopes.clear()
    start = time.perf_counter()
    agent.step()
    wall = time.perf_counter() - start
    (envelope,) = model.envelopes
    assert envelope.status.value == "COMPLETED", envelope.error
    return wall, envelope, sum(o.duration_s for o in tools.outcomes)


def measure(turns: int, tokens: int, tokens_per_s: float, tool: str,
            runtime: RuntimeName = "runc") -> tuple[list[dict[str, float]], float]:
    docker_client = connect(None)
    require_image(docker_client, IMAGE)
    server, url = start_server(reply(tokens, tokens_per_s, tool))
    home = Path(tempfile.mkdtemp())
    store = Store.open(f"sqlite:///{home / 'escrow.db'}")
    clock = Clock()
    rows: list[dict[str, float]] = []
    bare: list[float] = []
    try:
        with live_loop(docker_client, store, url, turns, clock, runtime) as (agent, tools, model, sandbox, _):
            for turn in range(turns):
                if turn % 10 == 0:  # interleaved with the turns, so both see the same load
                    bare.append(bare_docker_exec_s(sandbox.container.id, 3))
                clock.spent.clear()
                wall, envelope, tool_s = timed_step(agent, tools, model)
                model_s = envelope.timings.total_s
                rows.append({
                    "wall": wall, "model": model_s, "tool": tool_s, "overhead": wall - model_s - tool_s,
                    "recording": clock.spent["recording"],
                    "client": clock.spent["model"] - model_s,
                    "sandbox_adapter": clock.spent["tools"] - tool_s,
                    "loop": wall - clock.spent["recording"] - clock.spent["model"] - clock.spent["tools"],
                    "completion_tokens": envelope.usage.completion_tokens,
                    "prompt_tokens": envelope.usage.prompt_tokens,
                })
    finally:
        server.terminate()
        server.wait(timeout=10)
        store.close()
    return rows, statistics.median(bare)


def report(rows: list[dict[str, float]]) -> dict[str, object]:
    total = {k: sum(r[k] for r in rows) for k in rows[0]}
    return {
        "turns": len(rows),
        "per_turn_mean_ms": {k: 1000 * v / len(rows) for k, v in total.items() if "tokens" not in k},
        "per_turn_median_ms": {k: 1000 * statistics.median(r[k] for r in rows) for k in rows[0] if "tokens" not in k},
        "overhead_share": total["overhead"] / total["wall"],
        "recording_share": total["recording"] / total["wall"],
        "first_vs_last_overhead_ms": (1000 * rows[0]["overhead"], 1000 * rows[-1]["overhead"]),
        "prompt_tokens_first_last": (rows[0]["prompt_tokens"], rows[-1]["prompt_tokens"]),
        "completion_tokens_mean": total["completion_tokens"] / len(rows),
    }


def summarize(rows: list[dict[str, float]], bare: float, tool: str) -> dict[str, object]:
    return {**report(rows), "tool": tool, "bare_docker_exec_ms": 1000 * bare,
            "turn_over_bare_docker_exec": statistics.median(r["wall"] for r in rows) / bare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=100, help="Streamed chunks (tokens) per reply.")
    parser.add_argument("--tokens-per-s", type=float, default=50.0)
    parser.add_argument("--tool", choices=sorted(TOOL_CALLS), default="read_file", help="The one call of each turn.")
    parser.add_argument("--runtimes", default="runc,runsc", help="Comma-separated; each gets its own run.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runtimes: list[RuntimeName] = [r for r in args.runtimes.split(",") if r in ("runc", "runsc")]  # type: ignore[misc]
    summaries = {}
    for runtime in runtimes:
        rows, bare = measure(args.turns, args.tokens, args.tokens_per_s, args.tool, runtime)
        summaries[runtime] = summarize(rows, bare, args.tool)
    if args.json:
        print(json.dumps(summaries, indent=2))
        return
    first = summaries[runtimes[0]]
    print(f"{first['turns']} turns per runtime, one {args.tool} call each, {first['completion_tokens_mean']:.0f} "
          f"completion tokens/turn at {args.tokens_per_s:g} tokens/s")
    ratio = f"{runtimes[-1] + '/' + runtimes[0]:>12}" if len(runtimes) > 1 else ""
    header = "".join(f"{r:>10}" for r in runtimes) + ratio
    print(f"{'per turn, median ms':<36}{header}")
    labels = {"wall": "turn wall time", "model": "model (envelope total_s)", "tool": "tool (duration_s)",
              "overhead": "overhead = wall - model - tool", "recording": "  recording (journal)",
              "client": "  client wrapping", "sandbox_adapter": "  sandbox adapter (executor channel)",
              "loop": "  context + perimeter + loop"}
    rows_out = [(label, [s["per_turn_median_ms"][key] for s in summaries.values()])  # type: ignore[index]
                for key, label in labels.items()]
    rows_out.append(("bare docker exec (same run)", [s["bare_docker_exec_ms"] for s in summaries.values()]))
    for label, values in rows_out:
        print(f"{label:<36}" + "".join(f"{v:>10.2f}" for v in values) + _ratio(values))
    turn_over_bare = [float(s["turn_over_bare_docker_exec"]) for s in summaries.values()]  # type: ignore[arg-type]
    print(f"{'turn / bare docker exec (ratio)':<36}" + "".join(f"{v:>10.3f}" for v in turn_over_bare))
    for runtime, s in summaries.items():
        print(f"{runtime}: overhead share of turn time {100 * float(s['overhead_share']):.2f}% "  # type: ignore[arg-type]
              f"(recording {100 * float(s['recording_share']):.2f}%)")  # type: ignore[arg-type]


def _ratio(values: list[float]) -> str:
    """The last runtime over the first, when there are two and the first is not 0."""
    if len(values) < 2 or not values[0]:
        return ""
    return f"{values[-1] / values[0]:>11.2f}x"


if __name__ == "__main__":
    main()
