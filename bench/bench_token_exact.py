"""What ``--token-exact`` costs a turn: round trips and time, side by side
with chat mode in one run (issue 40: at most one HTTP round trip more a
turn, under 5% of a turn's time with a 100-token answer at 50 tokens/s).

The same scripted run, through ``run_agent`` (sandbox, store, loop as
``escrow run``), against the fault server posing as vLLM (``/version``,
``/tokenize``, ``/v1/completions`` with ids), in a process of its own so
its pacing does not share this one's GIL. Every turn the model answers 100
tokens at 50 tokens/s, held 2 s and sent whole (chat is not streamed
here, as token-exact is not: a stream's hundred paced writes would cost
chat more than its tokens) ending in one
``read_file`` call in the text tool protocol. Chat mode and token-exact
runs alternate, so both see the same load. Per turn (from one model call's
start to the next's): its wall time and the HTTP requests the server saw,
by path. The context budget counts with the server's ``/tokenize`` in both
modes (``--tokenizer auto`` on vLLM).

    .venv/bin/python bench/bench_token_exact.py [--turns 12] [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import statistics
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NamedTuple

from cli.logging_setup import configure_logging
from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.context.tokenizer import TokenCounter
from orchestrator.ports import Model
from orchestrator.settings import load_settings

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calculator"
VLLM = {"/version": {"version": "0.11.0"}, "/detokenize": {"prompt": ""}}
CALL = '<tool name="read_file">{"path": "calc.py"}</tool>'


def answer(tokens: int, tokens_per_s: float) -> Reply:
    """``tokens`` chat chunks of 4 characters, or ``tokens`` sampled ids."""
    text = ("I will read calc.py again to check the divisor in mean(). " * 10)[: 4 * tokens - len(CALL)] + CALL
    sampled = [ord(c) for c in text[:tokens]]  # the ids the engine says it sampled; the text carries the call
    return Reply(text=text, chunk_chars=4, tokens_per_s=tokens_per_s, completion_token_ids=sampled)


def serve(reply: Reply, conn: Connection) -> None:
    """The fault server, in its own process: answers ``reply`` to every
    completion; each message on ``conn`` is answered with the hits so far."""
    with FaultServer(endpoints=VLLM, model="bench-model", default=reply) as server:
        conn.send(server.base_url)
        while conn.recv() is not None:
            conn.send(server.hits)


class Marked:
    """The run's model, marking each call's start: the time and the server's hits so far."""

    def __init__(self, model: Model, hits: "Hits") -> None:
        self.model, self.hits = model, hits
        self.marks: list[tuple[float, list[str]]] = []
        self.calls_s: list[float] = []

    def call(self, request, *, cancel=None):
        start = time.perf_counter()
        self.marks.append((start, self.hits()))
        try:
            return self.model.call(request, cancel=cancel)
        finally:
            self.calls_s.append(time.perf_counter() - start)

    def __getattr__(self, name: str):
        return getattr(self.model, name)


class Hits:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __call__(self) -> list[str]:
        self.conn.send(True)
        return self.conn.recv()


class Turn(NamedTuple):
    turn: int
    wall_s: float
    call_s: float  # the model call alone: the client's renders and the answer
    hits: list[str]  # the requests the server saw from this call's start to the next's


def one_run(url: str, hits: Hits, *, token_exact: bool, turns: int, home: Path) -> list[Turn]:
    settings = load_settings(None, home=home, model_url=url, model="bench-model", tool_protocol="text",
                             token_exact=token_exact, stream=False, max_turns=turns, context_window=32768)
    marked: list[Marked] = []

    def around(model: Model, counter: TokenCounter) -> tuple[Model, TokenCounter]:
        marked.append(Marked(model, hits))
        return marked[0], counter  # type: ignore[return-value]

    run_agent(settings, RunRequest(task="Fix mean() in calc.py.", repo=EXAMPLE, verify="python3 -m pytest -q"),
              around_model=around)
    marks, calls_s = marked[0].marks, marked[0].calls_s
    return [Turn(n, b[0] - a[0], calls_s[n], b[1][len(a[1]):])
            for n, (a, b) in enumerate(zip(marks, marks[1:], strict=False))]


def summary(turns: list[Turn]) -> dict[str, Any]:
    later = [t for t in turns if t.turn != 0]  # the first turn also holds the run's start
    trips = [len(t.hits) for t in later]
    paths = Counter(p for t in later for p in t.hits)
    return {"turns": len(later), "turn_median_s": statistics.median(t.wall_s for t in later),
            "turn_mean_s": statistics.mean(t.wall_s for t in later),
            "call_median_s": statistics.median(t.call_s for t in later),
            "round_trips_median": statistics.median(trips), "round_trips_max": max(trips),
            "round_trips_per_turn": {n: trips.count(n) for n in sorted(set(trips))},
            "paths_per_turn": {p: c / len(later) for p, c in sorted(paths.items())},
            "second_turn_round_trips": [len(t.hits) for t in turns if t.turn == 1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2, help="Chat and token-exact runs, alternating.")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--tokens-per-s", type=float, default=50.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configure_logging(json_lines=False, level=logging.ERROR)  # each run's notices would bury the figures
    spawn = multiprocessing.get_context("spawn")
    here, there = spawn.Pipe()
    server = spawn.Process(target=serve, args=(answer(args.tokens, args.tokens_per_s), there), daemon=True)
    server.start()
    url, hits = here.recv(), Hits(here)
    measured: dict[str, list[Turn]] = {"chat": [], "token_exact": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-token-exact-") as home:
            for _ in range(args.rounds):
                for mode in measured:
                    measured[mode] += one_run(url, hits, token_exact=mode == "token_exact", turns=args.turns,
                                              home=Path(home))
    finally:
        here.send(None)
        server.join(timeout=10)
    chat, exact = summary(measured["chat"]), summary(measured["token_exact"])
    extra_s = exact["turn_median_s"] - chat["turn_median_s"]
    result = {"chat": chat, "token_exact": exact, "turn_ratio": exact["turn_median_s"] / chat["turn_median_s"],
              "extra_ms_per_turn": 1000 * extra_s, "extra_share": extra_s / chat["turn_median_s"],
              "extra_call_ms": 1000 * (exact["call_median_s"] - chat["call_median_s"]),
              "extra_round_trips_median": exact["round_trips_median"] - chat["round_trips_median"],
              "tokens": args.tokens, "tokens_per_s": args.tokens_per_s}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.rounds} x {args.turns}-turn runs a mode, {args.tokens}-token answers at {args.tokens_per_s:g} "
          "tokens/s; turns after the first")
    print(f"{'per turn':<30}{'chat':>12}{'token-exact':>14}")
    print(f"{'wall time, median (s)':<30}{chat['turn_median_s']:>12.3f}{exact['turn_median_s']:>14.3f}")
    print(f"{'wall time, mean (s)':<30}{chat['turn_mean_s']:>12.3f}{exact['turn_mean_s']:>14.3f}")
    print(f"{'model call, median (s)':<30}{chat['call_median_s']:>12.3f}{exact['call_median_s']:>14.3f}")
    print(f"{'HTTP requests, median':<30}{chat['round_trips_median']:>12g}{exact['round_trips_median']:>14g}")
    print(f"{'HTTP requests, most':<30}{chat['round_trips_max']:>12g}{exact['round_trips_max']:>14g}")
    for mode, data in (("chat", chat), ("token-exact", exact)):
        shown = ", ".join(f"{p} {n:.2f}" for p, n in data["paths_per_turn"].items())
        print(f"{mode} requests a turn: {shown}")
        print(f"  turns by requests: {data['round_trips_per_turn']}; second turns: {data['second_turn_round_trips']}")
    print(f"token-exact / chat turn time: {result['turn_ratio']:.3f} ({result['extra_ms_per_turn']:+.1f} ms, "
          f"{100 * result['extra_share']:+.2f}% of a chat turn); "
          f"extra round trips a turn (median): {result['extra_round_trips_median']:+g}")
    print(f"model call, token-exact - chat (median): {result['extra_call_ms']:+.1f} ms")


if __name__ == "__main__":
    main()
