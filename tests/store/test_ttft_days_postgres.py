"""Two writers adding the same per-day TTFT key at once on PostgreSQL. Each
finds no committed row for the key (the other's insert is not committed
yet), so each inserts its own: the key holds two rows. docs/SCHEMA.md says a
report and ``verify`` sum them like one, and a run taken out later keeps the
sum right; this drives that interleaving on a real server."""

from __future__ import annotations

from sqlalchemy import delete, func, select, true

from store import Recorder, Store
from store.read import ttft_days
from store.read.reports import read_slices
from store.read.run_totals import RUNS
from store.read.ttft_days import DAYS, KEY
from store.write import synthetic, totals_write
from store.write.retention import collect
from tests.store.test_postgres import postgres_url  # noqa: F401 - the throwaway cluster

T0 = 1_790_000_000.0  # one UTC day for both runs


def rows_per_key(store: Store) -> dict[tuple[object, ...], int]:
    with store.read() as conn:
        counted = conn.execute(select(*(DAYS.c[k] for k in KEY), func.count()).group_by(*(DAYS.c[k] for k in KEY)))
        return {tuple(row[:-1]): row[-1] for row in counted}


def histogram_equals_the_rows(store: Store) -> bool:
    kept = read_slices(store, by="model", since=None, until=None)[1]
    return bool(kept) and kept == read_slices(store, by="model", since=None, until=None, raw=True)[1]


def test_a_key_two_writers_inserted_at_once_is_summed_like_one(postgres_url: str) -> None:  # noqa: F811
    with Store.open(postgres_url) as store:
        assert store.dialect == "postgresql"
        moment = [T0]
        recorder = Recorder(store, clock=lambda: moment[0])
        older = synthetic.record_run(recorder, turns=4, seed=5)
        moment[0] = T0 + 600
        newer = synthetic.record_run(recorder, turns=4, seed=5)  # the same TTFTs: the same keys
        with store.read() as conn:
            whole, _ = ttft_days.sums(conn, true())
            delta = {run: ttft_days.sums(conn, RUNS.c.id == run)[0] for run in (older, newer)}
        shared = delta[older].keys() & delta[newer].keys()
        assert shared

        # The rollup as two runs finishing at once leave it: the newer run's
        # writer inserts its keys and has not committed when the older run's
        # writer adds the same keys and commits.
        with store.write() as conn:
            conn.execute(delete(DAYS))
        with store.write() as first:
            totals_write.add_days(first, delta[newer])
            with store.write() as second:
                totals_write.add_days(second, delta[older])

        per_key = rows_per_key(store)
        assert all(per_key[key] == 2 for key in shared), per_key  # the interleaving happened
        with store.read() as conn:
            assert ttft_days.stored(conn, None)[0] == whole
        assert all(check.ok for check in store.verify_all())
        assert histogram_equals_the_rows(store)

        # Taking the older run out subtracts its calls from each key's lowest
        # row, which the newer run's writer inserted: the sum stays right.
        with store.write() as conn:
            assert collect(conn, before=T0 + 300).runs_deleted == 1
        with store.read() as conn:
            assert ttft_days.stored(conn, None)[0] == ttft_days.sums(conn, true())[0] == delta[newer]
        assert all(check.ok for check in store.verify_all())
        assert histogram_equals_the_rows(store)
