"""Stored bytes per run and write-ahead latency: requests inline (the schema-3
write path) against requests by reference (schema 4), side by side.

Each run grows its context by ~1,500 tokens a turn (a 6,000-character tool
observation, ~4 characters a token). For 10, 30 and 100 turns the bench
records one run per layout into its own SQLite file and reports the file
size after VACUUM (the bytes the store really holds), bytes per turn, and the
ratio. It then times the write-ahead commit of each request at
synchronous=FULL, alternating layouts turn by turn, p50 and p99.

The inline layout is schema 3's: the same Recorder with ``blobs.split``
declining every request, so each request row keeps its whole text.

Usage: .venv/bin/python bench/bench_storage.py [--turns 10 30 100] [--latency-turns 100]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from orchestrator.contract import Message
from store import Recorder, Store
from store.write import blobs, synthetic

CHARS_PER_TURN = 6_000  # ~1,500 tokens
WORDS = ("def", "return", "assert", "import", "class", "self", "value", "error", "test", "None", "pytest", "fixture")


@contextmanager
def inline_requests() -> Iterator[None]:
    """The schema-3 write path: every request kept whole in its row."""
    original = blobs.split
    blobs.split = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        blobs.split = original  # type: ignore[assignment]


def observation(rng: random.Random) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < CHARS_PER_TURN:
        words.append(rng.choice(WORDS) + str(rng.randrange(1000)))
    return " ".join(words)


class Layout:
    def __init__(self, name: str, path: Path) -> None:
        self.name, self.store = name, Store.open(f"sqlite:///{path}", synchronous="FULL")
        self.recorder = Recorder(self.store)
        self.rng = random.Random(7)
        self.run_id = synthetic.start(self.recorder, self.rng)
        self.history: list[Message] = []

    def turn(self, turn: int) -> float:
        """Record one turn; returns the seconds the write-ahead request took."""
        with self.recorder.turn(self.run_id, turn) as tx:
            started = time.perf_counter()
            if self.name == "inline":
                with inline_requests():
                    call_id = tx.request(synthetic.request_for(turn, self.history))
            else:
                call_id = tx.request(synthetic.request_for(turn, self.history))
            took = time.perf_counter() - started
            tx.envelope(call_id, synthetic.envelope_for(self.rng, turn, ()))
            added = [
                Message(role="assistant", content=f"turn {turn}"),
                Message(role="user", content=observation(self.rng)),
            ]
            tx.commit(added)
        self.history.extend(added)
        return took


def stored_bytes(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
    return path.stat().st_size


def storage(turns: int, folder: Path) -> dict[str, int]:
    sizes = {}
    for name in ("inline", "by-reference"):
        path = folder / f"{name}-{turns}.db"
        layout = Layout(name, path)
        for turn in range(turns):
            layout.turn(turn)
        layout.store.close()
        empty = folder / f"empty-{name}-{turns}.db"
        Store.open(f"sqlite:///{empty}").close()
        sizes[name] = stored_bytes(path) - stored_bytes(empty)
    return sizes


def latency(turns: int, folder: Path) -> dict[str, list[float]]:
    layouts = [Layout(name, folder / f"lat-{name}.db") for name in ("inline", "by-reference")]
    samples: dict[str, list[float]] = {layout.name: [] for layout in layouts}
    for turn in range(turns):
        for layout in layouts:
            samples[layout.name].append(layout.turn(turn))
    for layout in layouts:
        layout.store.close()
    return samples


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 30, 100])
    parser.add_argument("--latency-turns", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("stored bytes per run (SQLite file after VACUUM, less an empty store)")
        print(f"{'turns':>6} {'inline (s3)':>14} {'by ref (s4)':>14} {'s3/turn':>10} {'s4/turn':>10} {'ratio':>7}")
        for turns in args.turns:
            sizes = storage(turns, folder)
            inline, ref = sizes["inline"], sizes["by-reference"]
            print(
                f"{turns:>6} {inline:>14,} {ref:>14,} {inline // turns:>10,} {ref // turns:>10,} {inline / ref:>6.1f}x"
            )
        samples = latency(args.latency_turns, folder)
        print(
            f"\nwrite-ahead request commit at synchronous=FULL, {args.latency_turns} turns, context +{CHARS_PER_TURN} "
            "chars a turn"
        )
        print(f"{'layout':>14} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        for name, values in samples.items():
            ms = [v * 1000 for v in values]
            print(f"{name:>14} {percentile(ms, 0.5):>8.2f} {percentile(ms, 0.99):>8.2f} {statistics.mean(ms):>8.2f}")
        inline_p50, ref_p50 = (percentile(samples[n], 0.5) for n in ("inline", "by-reference"))
        print(f"p50 ratio inline/by-reference: {inline_p50 / ref_p50:.2f}x")


if __name__ == "__main__":
    main()
