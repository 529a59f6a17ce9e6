"""CLI start-up: every sub-command module imported up front (how ``escrow``
was built before) against the lazy command group, side by side in one run.

For each command line, runs both forms as fresh interpreters, alternating,
--repeat times, and prints the median wall time of each and the ratio; then
the cumulative import time of ``cli.main`` from ``python -X importtime``,
and the ten slowest imports of the eager form. ``escrow runs`` lists the 50
newest of 300 generated runs (1 to 4 turns each) in a SQLite store made here;
the lazy form reads them with ``store.read.run_list``'s sqlite3 reader, the eager
one has already imported the whole store. The issue's goal is ``escrow runs``
under 0.3 s; the last rows print the floor under it: the interpreter, typer,
and typer with the pydantic adapters it builds each option with.

Usage: .venv/bin/python bench/bench_cli.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from store import Store
from store.write import synthetic

ROOT = Path(__file__).resolve().parents[1]
LAZY = "from cli.main import main; main()"
# The former cli/main.py imported every sub-command module at import time.
EAGER = (
    "import importlib; from cli.main import MODULES, main; "
    "[importlib.import_module(f'cli.{m}') for m in MODULES]; main()"
)


def wall(code: str, argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def import_time(code: str) -> tuple[float, list[tuple[int, str]]]:
    """Cumulative microseconds of the whole import, and the slowest imports."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], cwd=ROOT, check=True, capture_output=True, text=True
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, _, cumulative, name = line.replace("import time:", "|", 1).split("|")
        rows.append((int(cumulative), name))
    top_level = sum(c for c, name in rows if len(name) - len(name.lstrip()) == 1)  # one space: not nested
    return top_level / 1e6, sorted(rows, reverse=True)[:10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/escrow.db"
        with Store.open(url) as store:
            synthetic.record_many(store, 300, turns=4)
        lines = (["--help"], ["--version"], ["runs", "--db", url], ["runs", "--help"], ["report", "--help"])
        print(f"median of {args.repeat} fresh interpreters each, alternating eager and lazy\n")
        print(f"   {'command':<28} {'eager s':>8} {'lazy s':>8} {'ratio':>7}")
        for argv in lines:
            eager, lazy = [], []
            for _ in range(args.repeat):
                eager.append(wall(EAGER, argv))
                lazy.append(wall(LAZY, argv))
            shown = "escrow " + " ".join("URL" if a == url else a for a in argv)
            e, z = statistics.median(eager), statistics.median(lazy)
            print(f"   {shown:<28} {e:8.3f} {z:8.3f} {e / z:6.2f}x")
    # The floor under any typer command: typer 0.29 parses every option through
    # a pydantic TypeAdapter, so both libraries load before the command runs.
    for code, note in (("pass", "interpreter start-up alone"), ("import typer", "typer alone"),
                       ("import typer, pydantic, typer._adapters", "typer and its pydantic adapters")):
        alone = statistics.median(wall(code, []) for _ in range(args.repeat))
        print(f"   {'python -c ' + repr(code)[:17]:<28} {alone:8.3f}   ({note})")

    eager_s, slowest = import_time("import importlib; from cli.main import MODULES; "
                                   "[importlib.import_module(f'cli.{m}') for m in MODULES]")
    lazy_s, _ = import_time("import cli.main")
    print(f"\npython -X importtime, top-level cumulative: eager {eager_s:.3f} s, lazy {lazy_s:.3f} s, "
          f"ratio {eager_s / lazy_s:.1f}x")
    print("slowest imports of the eager form (cumulative):")
    for micros, name in slowest:
        print(f"   {micros / 1e6:7.3f} s  {name.strip()}")


if __name__ == "__main__":
    main()
