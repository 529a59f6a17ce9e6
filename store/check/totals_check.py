"""Whether a run's stored totals are still what its rows add up to: the
figures recomputed (``run_totals.compute``), and each row's digest against
its run's chain head now, as ``escrow verify`` checks them."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import Connection, and_, select, true

from store.check.cells import check_row
from store.read.run_totals import RUNS, TOTALS, compute, has_totals, stored
from store.write.totals_figures import FIGURES, digest, in_run, order


def problems(conn: Connection, run_id: str | None = None) -> dict[str, str]:
    """Per run whose stored totals are not what its rows add up to, what differs."""
    runs = and_(true() if run_id is None else RUNS.c.id == run_id, has_totals())
    have = stored(conn, runs)
    want, _ = compute(conn, runs)
    found: dict[str, str] = {}
    for key in sorted(have.keys() | want.keys(), key=order):
        if have.get(key) != want.get(key) and key[0] not in found:
            found[key[0]] = (f"run_totals for model {key[2]!r}, engine {key[3]!r}, own {key[1]} are "
                             f"{have.get(key)}, the run's rows add up to {want.get(key)}")
    for run, problem in digest_problems(conn, runs).items():
        found.setdefault(run, problem)
    return found


def digest_problems(conn: Connection, runs: Any) -> dict[str, str]:
    """Per run, the first totals row whose stored digest is not the one its
    figures and its run's chain head give now, as a report recomputes it
    (``aggregate_query.unchecked``): a digest altered, or the row stale."""
    rows = [dict(r) for r in conn.execute(
        select(TOTALS, RUNS.c.chain_head).join(RUNS, RUNS.c.id == TOTALS.c.run_id).where(runs)
        .order_by(TOTALS.c.id)).mappings()]
    for row in rows:
        check_row(TOTALS, row)
    model_rows = Counter((r["run_id"], r["own"]) for r in rows if r["model"] is not None)
    tool_s = {(r["run_id"], r["own"]): r["tool_s"] for r in rows if r["model"] is None}
    found: dict[str, str] = {}
    for r in rows:
        run_id, own, model, engine = r["run_id"], r["own"], r["model"], r["engine"]
        figures = tuple(r[name] for name in FIGURES)
        hashed = in_run(figures, model, tool_s.get((run_id, own), 0.0), model_rows[(run_id, own)])
        head = r["chain_head"] if isinstance(r["chain_head"], str) else ""
        if digest(head, (run_id, own, model, engine), hashed) != r["digest"] and run_id not in found:
            found[run_id] = (f"run_totals row {r['id']} (model {model!r}, engine {engine!r}, own {own}): its "
                             f"digest is not the one its figures and the run's chain head give")
    return found
