"""Reading and writing batches and their attempts (a run's lease, which a
batch attempt's run takes as every run does, is ``store.read.liveness``'s).

A task counts once: its outcome is its latest attempt, and ``--resume`` reruns
only the tasks whose latest attempt has no model verdict.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, insert, inspect, select, update

from orchestrator.contract import Frozen
from store.chain import VERDICT_EVENT
from store.check.cells import check_row
from store.errors import StoreDamaged
from store.schema.tables import ATTEMPT_STARTED, BatchAttemptRow, BatchRow, BatchTaskRow, EventRow, table_of

if TYPE_CHECKING:
    from store.store import Store

MODEL = "model"
INFRASTRUCTURE = "infrastructure"
STARTED = ATTEMPT_STARTED
INTERRUPTED = "interrupted"  # Ctrl-C ended it: not a verdict; --resume reruns the task

B = table_of(BatchRow)
BT = table_of(BatchTaskRow)
BA = table_of(BatchAttemptRow)
E = table_of(EventRow)
INFRA_ERROR = "INFRA_ERROR"  # the run-level verdict of an infrastructure failure
CANCELED = "CANCELED"


class AttemptView(Frozen):
    task_id: str
    number: int
    run_id: str | None
    outcome: str
    verdict: str | None
    error: str | None
    replica: str | None
    started_at: float
    finished_at: float | None


class BatchView(Frozen):
    id: str
    created_at: float
    task_file: str
    n_tasks: int
    settings: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    attempts: tuple[AttemptView, ...]

    def latest(self) -> dict[str, AttemptView]:
        """Each task's latest attempt (tasks never tried are absent)."""
        out: dict[str, AttemptView] = {}
        for attempt in self.attempts:
            if attempt.task_id not in out or attempt.number > out[attempt.task_id].number:
                out[attempt.task_id] = attempt
        return out

    def latest_runs(self) -> list[str]:
        """Each task's latest recorded run (of its latest attempt that made one), in task-file order."""
        runs: dict[str, tuple[int, str]] = {}  # task: (attempt number, run id)
        for attempt in self.attempts:
            if attempt.run_id is not None and attempt.number > runs.get(attempt.task_id, (0, ""))[0]:
                runs[attempt.task_id] = (attempt.number, attempt.run_id)
        return [runs[t][1] for t in self.tasks if t in runs]

    def pending(self) -> list[str]:
        """Tasks without a model verdict, in task-file order."""
        latest = self.latest()
        return [t for t in self.tasks if t not in latest or latest[t].outcome != MODEL]


def batch_note(batch_id: str, task_id: str) -> dict[str, str]:
    """What a batch attempt's run records in its config (chained with its
    genesis): the batch and task it was run for, which ``escrow report --by
    batch`` checks the batch tables against (they are outside the chain)."""
    return {"id": batch_id, "task_id": task_id}


def create_batch(store: Store, *, task_file: str, tasks: Mapping[str, tuple[int, dict[str, Any]]],
                 settings: Mapping[str, Any]) -> str:
    batch_id = uuid.uuid4().hex
    with store.write() as conn:
        conn.execute(insert(B).values(id=batch_id, created_at=time.time(), task_file=task_file, n_tasks=len(tasks),
                                      settings_json=json.dumps(dict(settings), sort_keys=True)))
        if tasks:
            conn.execute(insert(BT), [{"batch_id": batch_id, "task_id": task_id, "line": line,
                                       "task_json": json.dumps(row, sort_keys=True)}
                                      for task_id, (line, row) in tasks.items()])
    return batch_id


def resolve_batch(store: Store, ref: str) -> str | None:
    ids = matching_batches(store, ref, limit=2)
    return ids[0] if len(ids) == 1 else None


def matching_batches(store: Store, ref: str, *, limit: int) -> list[str]:
    """Up to ``limit`` batch ids that start with ``ref``, in id order."""
    if any(c in ref for c in "%_\\"):
        return []
    with store.read() as conn:
        ids = conn.execute(select(B.c.id).where(B.c.id.like(f"{ref}%")).order_by(B.c.id).limit(limit)).scalars()
        return [str(batch_id) for batch_id in ids]


def load_batch(store: Store, batch_id: str) -> BatchView | None:
    with store.read() as conn:
        row = conn.execute(select(B).where(B.c.id == batch_id)).mappings().first()
        if row is None:
            return None
        tasks = conn.execute(select(BT).where(BT.c.batch_id == batch_id).order_by(BT.c.line)).mappings().all()
        attempts = conn.execute(select(BA).where(BA.c.batch_id == batch_id).order_by(BA.c.started_at)).mappings().all()
    # Outside the chain and read into typed views: a cell of the wrong type is named, not a traceback.
    check_row(B, row)
    for task in tasks:
        check_row(BT, {**task, "id": f"{task['batch_id']!r}/{task['task_id']!r}"})
    for attempt in attempts:
        check_row(BA, attempt)
    return BatchView(
        id=row["id"], created_at=row["created_at"], task_file=row["task_file"], n_tasks=row["n_tasks"],
        settings=_json(B, row["id"], "settings_json", row["settings_json"]),
        tasks={t["task_id"]: _json(BT, f"{t['batch_id']}/{t['task_id']}", "task_json", t["task_json"]) for t in tasks},
        attempts=tuple(AttemptView(**{k: a[k] for k in AttemptView.model_fields}) for a in attempts),
    )


def _json(table: Any, row_id: str, column: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise StoreDamaged(f"damaged store: {table.name} row {row_id} column {column} holds text that is not JSON",
                           table=table.name, row_id=row_id, column=column) from None


def start_attempt(store: Store, batch_id: str, task_id: str, *, replica: str | None = None) -> str:
    attempt_id = uuid.uuid4().hex
    with store.write() as conn:
        number = conn.execute(select(func.count()).select_from(BA).where(
            (BA.c.batch_id == batch_id) & (BA.c.task_id == task_id))).scalar_one()
        conn.execute(insert(BA).values(id=attempt_id, batch_id=batch_id, task_id=task_id, number=number + 1,
                                       outcome=STARTED, replica=replica, started_at=time.time()))
    return attempt_id


def finish_attempt(store: Store, attempt_id: str, *, outcome: str, run_id: str | None, verdict: str | None,
                   error: str | None = None, was: str = STARTED) -> bool:
    """Record how the attempt ended, only while its outcome is still ``was``
    (fencing): a worker its executor declared lost, whose attempt was settled
    meanwhile, cannot overwrite it. False when fenced off."""
    with store.write() as conn:
        done = conn.execute(update(BA).where((BA.c.id == attempt_id) & (BA.c.outcome == was)).values(
            outcome=outcome, run_id=run_id, verdict=verdict, error=error, finished_at=time.time()))
    return bool(done.rowcount)


def list_batches(store: Store, *, page: int = 1, per_page: int = 50) -> tuple[list[str], int]:
    """One page of batch ids, newest first, and how many batches there are."""
    with store.read() as conn:
        total = int(conn.execute(select(func.count()).select_from(B)).scalar() or 0)
        ids = conn.execute(select(B.c.id).order_by(B.c.created_at.desc(), B.c.id.desc())
                           .limit(per_page).offset((max(1, page) - 1) * per_page)).scalars().all()
    return list(ids), total


def batches_of_runs(store: Store, run_ids: list[str]) -> list[str]:
    """The batches any of the given runs was an attempt of, newest first."""
    if not run_ids:
        return []
    with store.read() as conn:
        return list(conn.execute(select(B.c.id).where(B.c.id.in_(select(BA.c.batch_id).where(BA.c.run_id.in_(run_ids))))
                                 .order_by(B.c.created_at.desc(), B.c.id.desc())).scalars())


class RunAttempt(Frozen):
    """Which batch, task and attempt a run was (a batch run's page links back)."""

    batch_id: str
    task_id: str
    number: int


def attempt_of_run(store: Store, run_id: str) -> RunAttempt | None:
    """The batch attempt that made ``run_id``; None for a run made outside
    a batch (or a store from before batches were recorded)."""
    with store.read() as conn:
        if not inspect(conn).has_table(BA.name):
            return None
        row = conn.execute(select(BA.c.batch_id, BA.c.task_id, BA.c.number).where(BA.c.run_id == run_id)
                           .order_by(BA.c.started_at.desc()).limit(1)).mappings().first()
    return None if row is None else RunAttempt(**row)


def settle_lost(store: Store, batch_id: str, task_id: str, *, after: int, verdict: str, error: str,
                replica: str | None = None) -> AttemptView:
    """The attempt of a task whose worker process was lost, numbered above
    ``after``: a model verdict it recorded before dying stands (the task is not
    run again); one still ``started`` becomes an infrastructure failure; when
    the worker died before recording anything, that failure is recorded."""
    now = time.time()
    latest = select(BA).where((BA.c.batch_id == batch_id) & (BA.c.task_id == task_id) & (BA.c.number > after)
                              ).order_by(BA.c.number.desc()).limit(1)
    with store.write() as conn:
        row = conn.execute(latest).mappings().first()
        if row is None:
            conn.execute(insert(BA).values(id=uuid.uuid4().hex, batch_id=batch_id, task_id=task_id, number=after + 1,
                                           outcome=INFRASTRUCTURE, verdict=verdict, error=error, replica=replica,
                                           started_at=now, finished_at=now))
        elif row["outcome"] == STARTED:
            _settle_from_verdicts(conn, [row])
            conn.execute(update(BA).where((BA.c.id == row["id"]) & (BA.c.outcome == STARTED)).values(
                outcome=INFRASTRUCTURE, verdict=verdict, error=error, finished_at=now))
        row = conn.execute(latest).mappings().one()
    return AttemptView(**{k: row[k] for k in AttemptView.model_fields})


def abandon_started(store: Store, batch_id: str, *, verdict: str | None, error: str,
                    outcome: str = INFRASTRUCTURE) -> int:
    """Attempts a driver left ``started`` when it died become infrastructure
    failures before ``--resume`` (or ``interrupted`` ones, when Ctrl-C stopped
    it): fenced, so a worker of that driver still running cannot later record
    a second verdict for its task. One whose run committed its verdict first
    stands on it (``_settle_from_verdicts``): its task is not run again."""
    with store.write() as conn:
        started = conn.execute(select(BA).where((BA.c.batch_id == batch_id) & (BA.c.outcome == STARTED))
                               ).mappings().all()
        stood = _settle_from_verdicts(conn, started, interrupted=outcome == INTERRUPTED)
        done = conn.execute(update(BA).where((BA.c.batch_id == batch_id) & (BA.c.outcome == STARTED)).values(
            outcome=outcome, verdict=verdict, error=error, finished_at=time.time()))
    return int(done.rowcount) + stood


def chained_verdicts(conn: Connection, run_ids: list[str]) -> dict[str, tuple[str, str, float]]:
    """Per run, (verdict, detail, at) of its chained verdict event (the last,
    as verify reads it): what the run itself recorded, not the run row's copy."""
    if not run_ids:
        return {}
    rows = conn.execute(select(E.c.run_id, E.c.seq, E.c.data_json, E.c.at)
                        .where(E.c.run_id.in_(run_ids), E.c.kind == VERDICT_EVENT)).all()
    out: dict[str, tuple[int, tuple[str, str, float]]] = {}
    for run_id, seq, data_json, at in rows:
        try:
            data = json.loads(data_json)
        except (TypeError, ValueError):
            continue  # a damaged event vouches for nothing: the attempt is settled as lost
        if not isinstance(data, dict) or not isinstance(data.get("verdict"), str):
            continue
        if run_id not in out or seq > out[run_id][0]:
            out[run_id] = (seq, (data["verdict"], str(data.get("detail") or ""), at))
    return {run_id: found for run_id, (_, found) in out.items()}


def outcome_of(verdict: str, *, interrupted: bool = False) -> str:
    """The attempt outcome of a run's verdict, as ``runner.run_attempt`` sorts it."""
    if interrupted and verdict in (CANCELED, INFRA_ERROR):
        return INTERRUPTED
    return INFRASTRUCTURE if verdict == INFRA_ERROR else MODEL


def _settle_from_verdicts(conn: Connection, started: Any, *, interrupted: bool = False) -> int:
    """Attempts still ``started`` whose run committed its verdict (its driver
    or worker died after the verdict, before the attempt's outcome) get the
    outcome that verdict gives: the attempt stands and the task is not rerun."""
    verdicts = chained_verdicts(conn, [r["run_id"] for r in started if r["run_id"] is not None])
    stood = 0
    for row in started:
        found = verdicts.get(row["run_id"])
        if found is None:
            continue
        verdict, detail, at = found
        ended = outcome_of(verdict, interrupted=interrupted)
        stood += conn.execute(update(BA).where((BA.c.id == row["id"]) & (BA.c.outcome == STARTED)).values(
            outcome=ended, verdict=verdict, error=None if ended == MODEL else detail, finished_at=at)).rowcount
    return stood
