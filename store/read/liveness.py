"""Whether a run's owner is alive: every run holds a lease (``run_leases``)
from its first row, renewed while its process lives. A run still ``running``
whose lease expired reads ``crashed``, with the moment it was last alive (the
lease's last heartbeat). The one reading of that rule for every view of a run:
``runs``, ``show``, ``report``, the viewer and ``--status``; and the one writer
of leases: claimed with the run's first row (``claim_run``), renewed by its
process's heartbeat (``renew_lease``) and dropped when it ends."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, case, delete, exists, insert, not_, select, update

from orchestrator.contract import Frozen
from orchestrator.trajectory import RunView
from store.schema.tables import ATTEMPT_STARTED, BatchAttemptRow, Run, RunLease, table_of
from store.transactions import Readable, Writable

CRASHED = "crashed"
RUNNING = "running"
RL = table_of(RunLease)
R = table_of(Run)
BA = table_of(BatchAttemptRow)


def now_or(now: float | None) -> float:
    return time.time() if now is None else now


def lapsed(conn: Connection, run_ids: list[str], now: float) -> dict[str, float]:
    """The given runs still ``running`` whose lease expired, each with its last heartbeat."""
    if not run_ids:
        return {}
    rows = conn.execute(select(RL.c.run_id, RL.c.heartbeat_at).join(R, R.c.id == RL.c.run_id).where(
        RL.c.run_id.in_(run_ids) & (R.c.status == RUNNING) & (RL.c.expires_at < now)))
    return {str(run_id): float(at) for run_id, at in rows}


def marked(runs: list[RunView], conn: Connection, now: float) -> list[RunView]:
    """The runs with ``crashed`` (and when last alive) where their owner is gone."""
    gone = lapsed(conn, [r.id for r in runs if r.status == RUNNING], now)
    return [r.model_copy(update={"status": CRASHED, "last_alive_at": gone[r.id]}) if r.id in gone else r for r in runs]


def _lapsed_lease(now: float) -> ColumnElement[bool]:
    """A condition on ``runs``: the run's lease expired before ``now``."""
    return exists().where((RL.c.run_id == R.c.id) & (RL.c.expires_at < now))


def status_clause(status: str, now: float) -> ColumnElement[Any]:
    """The runs ``--status STATUS`` lists: ``crashed`` are running runs whose
    lease lapsed, ``running`` the others still running."""
    gone = _lapsed_lease(now)
    if status == CRASHED:
        return and_(R.c.status == RUNNING, gone)
    if status == RUNNING:
        return and_(R.c.status == RUNNING, not_(gone))
    return R.c.status == status


def status_sql(now: float) -> ColumnElement[Any]:
    """A run's status as every view reads it, in SQL: ``crashed`` for a running
    run whose lease lapsed (the key ``report --by status`` groups on)."""
    return case((and_(R.c.status == RUNNING, _lapsed_lease(now)), CRASHED), else_=R.c.status)


def is_open(status: str) -> bool:
    """Still without a verdict: running, or crashed (its owner gone, or
    seemingly gone to a reader while it lives on)."""
    return status in (RUNNING, CRASHED)


class LeaseClaim(Frozen):
    """A run's lease, taken as the run is created (``Recorder.start_run``):
    ``owner`` holds it for ``lease_s`` seconds; ``attempt_id`` is the batch
    attempt that notes the run in the same transaction."""

    owner: str
    lease_s: float
    attempt_id: str | None = None


def claim_run(conn: Connection, run_id: str, claim: LeaseClaim) -> None:
    """Take ``claim`` for the run inside the caller's transaction, noting the
    attempt's run (fenced as ``finish_attempt``). Written with the run's own
    row, a process killed at any point leaves either no run or a run with
    its lease: never a ``running`` run without one, which would never read
    as crashed."""
    now = time.time()
    if claim.attempt_id is not None:
        conn.execute(update(BA).where((BA.c.id == claim.attempt_id) & (BA.c.outcome == ATTEMPT_STARTED))
                     .values(run_id=run_id))
    conn.execute(delete(RL).where(RL.c.run_id == run_id))
    conn.execute(insert(RL).values(run_id=run_id, owner=claim.owner, heartbeat_at=now,
                                   expires_at=now + claim.lease_s))


# A lease taken, renewed and dropped for a run that exists, each in a
# transaction of its own (``claim_run`` takes the first with the run's row).

def take_lease(store: Writable, run_id: str, owner: str, lease_s: float, *, attempt_id: str | None = None) -> None:
    """The lease of a run that already exists."""
    with store.write() as conn:
        claim_run(conn, run_id, LeaseClaim(owner=owner, lease_s=lease_s, attempt_id=attempt_id))


def renew_lease(store: Writable, run_id: str, lease_s: float) -> None:
    """A heartbeat: the lease runs ``lease_s`` seconds from now."""
    now = time.time()
    with store.write() as conn:
        conn.execute(update(RL).where(RL.c.run_id == run_id).values(heartbeat_at=now, expires_at=now + lease_s))


def release_lease(store: Writable, run_id: str) -> None:
    """Drop the lease of a run that has ended. A run its owner could not end
    (the store was away) keeps its lease, which lapses: it then reads crashed."""
    with store.write() as conn:
        conn.execute(delete(RL).where((RL.c.run_id == run_id) & ~select(R.c.id).where(
            (R.c.id == run_id) & (R.c.status == RUNNING)).exists()))


def crashed_runs(store: Readable, *, now: float | None = None) -> set[str]:
    """Runs still ``running`` whose lease expired: their process died."""
    with store.read() as conn:
        rows = conn.execute(select(R.c.id).where(status_clause(CRASHED, now_or(now)))).scalars().all()
    return set(rows)
