"""The viewer's reads (store/read/browse.py) and pages on PostgreSQL give what
they give on SQLite: the same rows are copied from a SQLite store into a
throwaway PostgreSQL cluster (tests/store's fixture), then every read and
page is asked of both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Table, select

from cli.view.jinja_pages import Links
from cli.view.site import Site
from store import Store
from store.read.browse import RunFilter
from store.schema.tables import CHAINED, Blob, Run, table_of
from store.write import synthetic
from tests.store.test_postgres import postgres_url  # noqa: F401 - the throwaway cluster
from tests.view.recorded import record_reasoning_run

FILTERS = (
    RunFilter(), RunFilter(descending=False, per_page=7, page=2), RunFilter(verdict="PASS"),
    RunFilter(model="qwen3-0.6b", text="#"), RunFilter(text="100%_"), RunFilter(min_turns=2, max_turns=2),
    RunFilter(sort="turns"), RunFilter(sort="cost", descending=False, max_cost=0.0004), RunFilter(sort="tokens"),
    RunFilter(since=1_700_000_000 + 5 * 3600, until=1_700_000_000 + 9 * 3600), RunFilter(batch="b1"),
)


def copy_rows(source: Store, target: Store) -> None:
    tables: list[Table] = [table_of(Run), table_of(Blob), *(table_of(m) for m in CHAINED)]
    with source.read() as conn:
        rows = {t.name: [dict(r) for r in conn.execute(select(t)).mappings()] for t in tables}
    with target.write() as conn:
        for t in tables:
            ordered = sorted(rows[t.name], key=lambda r: (r.get("run_id") or "", r.get("seq") or 0))
            if ordered:
                conn.execute(t.insert(), ordered)


@pytest.fixture(scope="module")
def both(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Store, str]]:  # noqa: F811
    path: Path = tmp_path_factory.mktemp("pg-view") / "escrow.db"
    with Store.open(f"sqlite:///{path}", synchronous="OFF") as recording:
        synthetic.record_many(recording, 30, turns=3, seed=4)
        long_run = record_reasoning_run(recording, turns=55)
    with Store.open(f"sqlite:///{path}", create=False, readonly=True) as lite, Store.open(postgres_url) as pg:
        assert pg.dialect == "postgresql"
        copy_rows(lite, pg)
        yield lite, pg, long_run


@pytest.mark.parametrize("wanted", FILTERS)
def test_run_pages_are_the_same(both: tuple[Store, Store, str], wanted: RunFilter) -> None:
    lite, pg, _ = both
    got = lite.browse(wanted)
    assert got.total > 0 or wanted.text == "100%_" or wanted.batch
    assert pg.browse(wanted) == got


def test_reads_of_a_run_are_the_same(both: tuple[Store, Store, str]) -> None:
    lite, pg, long_run = both
    assert pg.facets() == lite.facets()
    ids = [s.run.id for s in lite.browse(RunFilter(per_page=40)).runs]
    assert pg.summaries(ids) == lite.summaries(ids)
    for run_id in (ids[0], long_run):
        assert pg.chain_positions(run_id) == lite.chain_positions(run_id)
        assert pg.turn_index(run_id) == lite.turn_index(run_id)
        for first, last in ((None, None), (50, 55), (0, 0)):
            a, b = lite.turn_slice(run_id, first, last), pg.turn_slice(run_id, first, last)
            assert b.trajectory == a.trajectory and b.appended_before == a.appended_before
            # The tails are parsed by each database: the same messages.
            assert {k: json.loads(v) for k, v in b.last_messages.items()} == {
                k: json.loads(v) for k, v in a.last_messages.items()
            }
        calls = [c.id for c in lite.calls(run_id)]
        assert pg.requests(calls) == lite.requests(calls)
    assert len(lite.turn_slice(long_run, 50, 55).last_messages) == 5


def test_pages_are_the_same(both: tuple[Store, Store, str]) -> None:
    lite, pg, long_run = both
    sites = [Site(store, Links(static=False)) for store in (lite, pg)]
    other = lite.browse(RunFilter()).runs[0].run.id
    pages = [
        lambda s: s.runs_page({"verdict": "PASS", "sort": "cost"}),
        lambda s: s.run_page(long_run),
        lambda s: s.run_page(long_run, page=2),
        lambda s: s.run_page(long_run, "contents 4"),
        lambda s: s.chain_page(long_run),
        lambda s: s.compare_page(other, long_run),
        lambda s: s.chain_status_page(long_run),
    ]
    for render in pages:
        assert render(sites[1]) == render(sites[0])
    assert "Hash chain verified" in sites[1].chain_status_page(long_run)
    assert "Hash chain broken" not in sites[1].run_page(long_run)
    assert "turns left: 5;" in sites[1].run_page(long_run, page=2)
