"""Tamper sweep (issue 43's closing figures): every cell of every row of the
chained and checked tables changed, one edit at a time by raw SQL on a copy
of a store, then ``escrow verify --all``.

The store holds a finished run, a run cut off mid-call (no verdict, no
totals) and two batch runs (a batch's attempts note them; their configs name
their batch and task), as tests/store/test_tamper.py and
tests/reports/test_batch_attribution.py build them. A change is detected when
verify exits non-zero naming the row's run (runs.id or the row's run_id).
An edit verify does not see is then put to the readers that check the tables
outside the chain (``report --by batch``, ``report --by model``): refused
(exit 4) counts as detected there; the same figures as before is an edit of
nothing a figure reads; changed figures with exit 0 is undetected.

Usage: PYTHONPATH=. .venv/bin/python bench/sweep_tamper.py [--tables runs,events,...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

from store import Recorder, Store
from store.schema.tables import CHAINED_TABLES
from store.write import batches as bstore
from tests.reports.test_batch_attribution import batch_run
from tests.store.test_damage import code_of, invoke
from tests.store.test_tamper import altered, record_finished_and_crashed

CHECKED = ("runs", *CHAINED_TABLES, "run_totals", "ttft_days", "batches", "batch_tasks", "batch_attempts")
# What a row's run is named by, where the table does not have run_id.
RUN_COLUMN = {"runs": "id"}
READERS = (("report", "--since", "3650d", "--by", "batch", "--json"),
           ("report", "--since", "3650d", "--by", "model", "--json"))


def build(path: Path) -> None:
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        record_finished_and_crashed(recorder)
        batch = bstore.create_batch(store, task_file="a.jsonl", tasks={"a": (1, {}), "b": (2, {})}, settings={})
        batch_run(recorder, batch, "a", 13)
        batch_run(recorder, batch, "b", 14)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def cells(path: Path, tables: tuple[str, ...]) -> list[tuple[str, int, str, object, str | None]]:
    """(table, rowid, column, value, run id) of every cell of the tables the store has."""
    out = []
    with closing(sqlite3.connect(path)) as conn:
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in tables:
            if table not in present:
                print(f"no table {table} in this store", file=sys.stderr)
                continue
            names = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            owner = RUN_COLUMN.get(table, "run_id")
            for row in conn.execute(f'SELECT rowid, * FROM "{table}"'):
                values = dict(zip(names, row[1:], strict=True))
                run = values.get(owner)
                out += [(table, row[0], name, value, run if isinstance(run, str) else None)
                        for name, value in values.items()]
    return out


def figures(stdout: str) -> object:
    """A reader's JSON less the moment it was asked ("since": now less 3650 days)."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(data, dict):
        data.pop("since", None)
    return data


def readers(path: Path) -> list[tuple[int, object]]:
    return [(code_of(r := invoke(path, *args)), figures(r.stdout)) for args in READERS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", default=",".join(CHECKED))
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sweep-tamper-") as where:
        pristine, copy = Path(where) / "pristine.db", Path(where) / "copy.db"
        build(pristine)
        assert code_of(invoke(pristine, "verify", "--all")) == 0
        before = readers(pristine)
        assert all(code == 0 for code, _ in before), before
        tally: Counter[str] = Counter()
        by_table: dict[str, Counter[str]] = {}
        unnamed, undetected, refused_elsewhere = [], [], []
        edits = [(cell, new) for cell in cells(pristine, tuple(args.tables.split(",")))
                 for new in ([altered(cell[3]), 1000] if cell[3] is None else [altered(cell[3])])]
        for (table, rowid, column, value, run), new in edits:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{copy}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(pristine, copy)
            with closing(sqlite3.connect(copy)) as conn, conn:
                try:
                    changed = conn.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?',
                                           (new, rowid)).rowcount
                except sqlite3.IntegrityError as exc:  # a constraint refuses the edit: nothing changed
                    tally["refused by a constraint"] += 1
                    print(f"constraint: {table}.{column}: {exc}", file=sys.stderr)
                    continue
            assert changed == 1
            counts = by_table.setdefault(table, Counter())
            counts["edits"] += 1
            tally["edits"] += 1
            result = invoke(copy, "verify", "--all")
            code = code_of(result)
            if code != 0:
                tally["verify detected"] += 1
                counts["verify detected"] += 1
                text = result.output + (getattr(result.exception, "message", "") or "")
                if run is not None and run[:12] not in text:
                    # A wrong-typed cell is refused as a damaged store naming its table, row and column.
                    kind = "damaged store" if code == 4 else f"exit {code}"
                    unnamed.append(f"{table}.{column} {value!r}->{new!r}: {kind}")
                continue
            after = readers(copy)
            if any(code == 4 for code, _ in after):
                tally["refused by a reader"] += 1
                counts["refused by a reader"] += 1
                refused_elsewhere.append(f"{table}.{column}")
            elif after == before:
                tally["no figure moved"] += 1
                counts["no figure moved"] += 1
                undetected.append({"cell": f"{table}.{column}", "rowid": rowid, "figures moved": False})
            else:
                tally["figures moved, exit 0"] += 1
                counts["figures moved, exit 0"] += 1
                undetected.append({"cell": f"{table}.{column}", "rowid": rowid, "figures moved": True})
    print(json.dumps({
        "edits": tally["edits"],
        "verify detected": tally["verify detected"],
        "detected naming the run": tally["verify detected"] - len(unnamed),
        "detected without naming the run": dict(Counter(unnamed)),
        "refused by report --by batch/model (outside verify)": tally["refused by a reader"],
        "undetected, no figure moved": tally["no figure moved"],
        "undetected, figures moved with exit 0": tally["figures moved, exit 0"],
        "edits a constraint refused": tally["refused by a constraint"],
        "by table": {t: dict(c) for t, c in by_table.items()},
        "refused outside verify": sorted(set(refused_elsewhere)),
        "undetected cells": dict(Counter(f"{u['cell']} (figures moved: {u['figures moved']})" for u in undetected)),
        "seconds": round(time.monotonic() - started),
    }, indent=1))


if __name__ == "__main__":
    main()
