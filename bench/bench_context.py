"""Per-turn cost of context assembly and token counting as history grows.

For histories of about 1k, 10k and 100k tokens, one turn (append an
assistant message and a ~500-token observation, render, build the
ModelRequest) is timed three ways in one run:

  incremental   the ContextAssembler as the loop uses it: only the new messages are
                hashed and tokenized; totals are kept in the state
  hash-cache    every message re-hashed each turn, counts served from the
                content-hash cache (no re-tokenizing)
  full          every message re-tokenized each turn (no cache at all)

Usage: .venv/bin/python bench/bench_context.py [--turns 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

from orchestrator.context import Budget, ContextAssembler, MessageCounter, TiktokenCounter
from orchestrator.contract import Message, ToolCall, ToolSpec

TOOLS = (
    ToolSpec(
        name="bash",
        description="Run a command.",
        parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
    ),
)
SIZES = (1_000, 10_000, 100_000)


def observation(t: int) -> str:
    lines = [
        f"tests/test_mod{t}.py::test_case_{i} FAILED  src/mod{t}.py:{i * 7 + t}: AssertionError: {i * t:#x} != {i + t}"
        for i in range(18)
    ]
    return "\n".join(lines)


def turn_messages(t: int) -> list[Message]:
    call = ToolCall(id=f"call_{t}", name="bash", arguments=f'{{"cmd": "pytest -x tests/test_mod{t}.py"}}')
    return [
        Message(role="assistant", content=f"Turn {t}: the failure is in mod{t}; rerun its tests.", tool_calls=(call,)),
        Message(role="tool", tool_call_id=f"call_{t}", content=observation(t)),
    ]


def filled_context(counter: TiktokenCounter, tokens: int) -> tuple[ContextAssembler, int]:
    ctx = ContextAssembler(system="You are a coding agent.", task="Fix the failing tests.", tools=TOOLS,
                  budget=Budget(s_max=tokens * 2 + 50_000, k_max=1024), counter=counter)
    t = 0
    while ctx.state.message_tokens < tokens:
        t += 1
        ctx.append(turn_messages(t), turn=t)
    return ctx, t


def time_turns(ctx: ContextAssembler, first: int, turns: int, per_turn) -> list[float]:
    out = []
    for t in range(first, first + turns):
        started = time.perf_counter()
        per_turn(ctx, t)
        out.append(time.perf_counter() - started)
    return out


def incremental(ctx: ContextAssembler, t: int) -> None:
    ctx.append(turn_messages(t), turn=t)
    ctx.render(turn=t, turns_left=5).build_request(model="m")


def with_counter(make_counter):
    def step(ctx: ContextAssembler, t: int) -> None:
        ctx.append(turn_messages(t), turn=t)
        r = ctx.render(turn=t, turns_left=5)
        counts = make_counter(ctx)
        sum(counts.message(m) for m in r.messages) + counts.tools(r.tools)
        r.build_request(model="m")
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=15, help="timed turns per size and method")
    args = parser.parse_args()
    counter = TiktokenCounter("cl100k_base")
    methods = {
        "incremental": incremental,
        "hash-cache": with_counter(lambda ctx: ctx.counts),
        "full": with_counter(lambda ctx: MessageCounter(counter)),
    }
    rows = []
    for size in SIZES:
        medians = {}
        for name, step in methods.items():
            ctx, t = filled_context(counter, size)
            start = ctx.state.message_tokens
            medians[name] = statistics.median(time_turns(ctx, t + 1, args.turns, step))
        rows.append((size, start, ctx.state.message_tokens, medians))
    print(f"per-turn median over {args.turns} turns (ms); history tokens at the start and end of the timed turns;"
          f" tokenizer {counter.name}")
    print(
        f"{'history':>9} {'start':>8} {'end':>8} {'incremental':>12} {'hash-cache':>11} {'full':>9} {'full/incr':>10} "
        f"{'hash/incr':>10}"
    )
    for size, start, end, m in rows:
        print(
            f"{size:>9,} {start:>8,} {end:>8,} {m['incremental'] * 1e3:>12.3f} {m['hash-cache'] * 1e3:>11.3f} "
            f"{m['full'] * 1e3:>9.3f} {m['full'] / m['incremental']:>9.1f}x {m['hash-cache'] / m['incremental']:>9.1f}x"
        )
    first, last = rows[0][3]["incremental"], rows[-1][3]["incremental"]
    print(f"incremental per-turn cost, {SIZES[-1]:,} vs {SIZES[0]:,} tokens of history: {last / first:.2f}x")


if __name__ == "__main__":
    main()
