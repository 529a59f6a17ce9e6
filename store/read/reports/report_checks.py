"""What an aggregate report checks before it sums a run read from its rows:
that its chain verifies (no digested totals vouch for those rows), and that
its batch attempts name the batch and task its own config does."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, select

from store.check.cells import check_row
from store.engine import driver_rows
from store.errors import BatchAttributionMismatch, UncheckedRows
from store.read.reports.report_window import BATCH_ATTEMPTS, batch_note_sql
from store.read.run_totals import RUNS


def check_attribution(conn: Connection, runs: Any) -> None:
    """Raise BatchAttributionMismatch for the runs ``runs`` selects whose
    batch attempts (batch, task) are not the one their own config names: an
    attempt's batch, task or run edited. A run that names none, attributed
    to a batch whose other runs name theirs, is blamed too (an attempt
    pointed at a plain run); in a batch none of whose runs names one (runs
    recorded before they did) there is nothing to check against."""
    dialect = conn.dialect.name
    noted = {run_id: (batch, task) for run_id, batch, task in driver_rows(conn, select(
        RUNS.c.id, batch_note_sql(dialect, "id"), batch_note_sql(dialect, "task_id")).where(runs))}
    attributed: dict[str, set[tuple[Any, Any]]] = defaultdict(set)
    for row in conn.execute(select(BATCH_ATTEMPTS.c.id, BATCH_ATTEMPTS.c.run_id, BATCH_ATTEMPTS.c.batch_id,
                                   BATCH_ATTEMPTS.c.task_id).where(BATCH_ATTEMPTS.c.run_id.in_(list(noted)))).mappings():
        check_row(BATCH_ATTEMPTS, row)
        attributed[row["run_id"]].add((row["batch_id"], row["task_id"]))
    noting = {batch for batch, _ in noted.values() if batch is not None}
    noting |= {batch for run_id, pairs in attributed.items() for batch, _ in pairs if noted[run_id][0] is not None}
    bad: dict[str, str] = {}
    for run_id, note in sorted(noted.items()):
        got = attributed.get(run_id, set())
        if note[0] is None:
            if any(batch in noting for batch, _ in got):
                bad[run_id] = f"run {run_id} names no batch, an attempt of batch {sorted(got, key=repr)[0][0]} names it"
        elif got != {note}:
            said = ", ".join(f"batch {b} task {t}" for b, t in sorted(got, key=repr)) or "no attempt"
            bad[run_id] = f"run {run_id} recorded batch {note[0]} task {note[1]}, the attempts say {said}"
    if bad:
        raise BatchAttributionMismatch(sorted(bad), detail=next(iter(bad.values())))


def check_unsummed(conn: Connection, runs: Any) -> None:
    """Raise UncheckedRows unless the chain of every run ``runs`` selects
    (those read from their rows: no digested totals vouch for them)
    verifies: the rows a report sums are then the rows the run recorded."""
    from store.check import verify  # it reads the tables reports do; imported where a report needs it

    # PostgreSQL reads each statement at its own moment (read committed): a
    # live run's row and its chained rows read while it appends may disagree
    # once; an altered row disagrees every time. SQLite reads one snapshot.
    tries = 1 if conn.dialect.name == "sqlite" else 3
    bad: dict[str, str] = {}
    for run_id in conn.execute(select(RUNS.c.id).where(runs).order_by(RUNS.c.id)).scalars():
        for _ in range(tries):
            check = verify.verify_run(conn, run_id)
            if check is None or check.ok:
                break
        if check is not None and not check.ok:
            bad[run_id] = f"run {run_id}: {check.problem}"
    if bad:
        raise UncheckedRows(sorted(bad), detail=next(iter(bad.values())))
