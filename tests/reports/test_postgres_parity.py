"""Every report and export form gives the same output on PostgreSQL as on
SQLite. The runs are recorded once into SQLite (varied models, verdicts,
days, retries; an imported run; a run whose tool output holds U+0000; a
run whose server sent no cached count) and
copied row for row into a throwaway PostgreSQL cluster (tests/store's
fixture); then each form runs as the real command against both stores."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Table, select
from typer.testing import CliRunner

from cli.main import app
from orchestrator.costing import GROUP_BY
from store import Store
from store.read import run_totals, ttft_days
from store.read.reports import read_slices
from store.schema.tables import BATCH_TABLES, CHAINED, Blob, Run, table_of
from store.write import synthetic, totals_write
from store.write.importer import import_file
from tests.interop.conftest import own
from tests.reports.test_absent_figures import NO_CACHE_COUNT, record_calls
from tests.store.test_nul_text import VARIANTS, record
from tests.store.test_postgres import postgres_url  # noqa: F401 - the throwaway cluster

FIRST_AT = 1_700_000_000.0
RUNS = table_of(Run)
REPORT_FORMS = ((), ("--json",), ("--csv",), ("--html", "{out}"))
WINDOWS = ((), ("--since", "2023-11-15", "--until", "2023-11-16"), ("--include-replays",))
EXPORT_FORMS = (
    ("--format", "messages-jsonl"), ("--format", "messages-jsonl", "--include-unverified", "--reasoning"),
    ("--format", "messages-jsonl", "--include-unverified", "--tokens"), ("--format", "events-jsonl"),
    ("--format", "atif"), ("--format", "otel", "-o", "{out}"),
)


def copy_rows(source: Store, target: Store) -> None:
    """Every row, through the tables' own column types (the escaping included)."""
    tables: list[Table] = [table_of(Run), table_of(Blob), *(table_of(m) for m in CHAINED),
                           *(table_of(m) for m in BATCH_TABLES)]
    with source.read() as conn:
        rows = {t.name: [dict(r) for r in conn.execute(select(t)).mappings()] for t in tables}
    with target.write() as conn:
        for t in tables:
            ordered = sorted(rows[t.name], key=lambda r: (r.get("run_id") or "", r.get("seq") or 0))
            if ordered:
                conn.execute(t.insert(), ordered)


@pytest.fixture(scope="module")
def stores(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:  # noqa: F811
    folder = tmp_path_factory.mktemp("parity")
    lite = f"sqlite:///{folder / 'escrow.db'}"
    with Store.open(lite, synchronous="OFF") as recording:
        ids = synthetic.record_many(recording, 24, turns=4, seed=11, first_at=FIRST_AT, spacing_s=5 * 3600)
        nul_run = record(recording, VARIANTS["nul inside"])
        imported = import_file(recording, own("inspect/arith.eval")).run_ids[0]
        record_calls(recording, "no-cache-count", (NO_CACHE_COUNT, NO_CACHE_COUNT))  # cached absent, not 0
    with Store.open(lite, readonly=True) as source, Store.open(postgres_url) as pg:
        assert pg.dialect == "postgresql"
        copy_rows(source, pg)
        with pg.write() as conn:  # the totals of schema 8, computed by PostgreSQL from the copied rows
            finished = conn.execute(select(RUNS.c.id).where(RUNS.c.status == "finished")).scalars().all()
            totals_write.write(conn, finished)
    home = folder / "home"
    home.mkdir()
    yield {"urls": {"sqlite": lite, "postgresql": postgres_url}, "runs": [ids[0], ids[7], nul_run, imported],
           "home": home, "folder": folder}


def outputs(stores: dict[str, object], argv: tuple[str, ...]) -> dict[str, tuple[int, str, str]]:
    """(exit code, stdout, the file written if any) of one command on each backend."""
    out = {}
    for backend, url in stores["urls"].items():  # type: ignore[attr-defined]
        target = Path(stores["folder"]) / f"out-{backend}"  # type: ignore[arg-type]
        target.unlink(missing_ok=True)
        args = [a.replace("{out}", str(target)) for a in argv]
        result = CliRunner().invoke(
            app, [*args, "--db", url], env={"ESCROW_HOME": str(stores["home"]), "COLUMNS": "200"}
        )
        written = target.read_text() if target.exists() else ""
        out[backend] = (result.exit_code, result.stdout, written)
    return out


# The OTel SDK draws the process's instance id and the trace and span ids at
# random: not figures of the runs. Each distinct id becomes its order of first
# appearance, so the span tree is still compared.
INSTANCE = re.compile(r'("service\.instance\.id", "value": \{"stringValue": )"[^"]*"')
SPAN_IDS = re.compile(r'"(traceId|spanId|parentSpanId)": "([0-9a-f]+)"')


def without_random_ids(text: str) -> str:
    seen: dict[str, int] = {}
    text = INSTANCE.sub(r'\1"-"', text)
    return SPAN_IDS.sub(lambda m: f'"{m[1]}": {seen.setdefault(m[2], len(seen))}', text)


def same(got: dict[str, tuple[int, str, str]]) -> None:
    lite, pg = ((code, out, without_random_ids(written)) for code, out, written in (got["sqlite"], got["postgresql"]))
    assert lite[0] == 0, lite[1]
    assert lite[1] or lite[2], "the form printed and wrote nothing"
    assert pg == lite


@pytest.mark.parametrize("form", REPORT_FORMS, ids=lambda f: " ".join(f) or "table")
@pytest.mark.parametrize("index", range(4), ids=["first", "eighth", "nul-output", "imported"])
def test_run_report_forms(stores: dict[str, object], index: int, form: tuple[str, ...]) -> None:
    run_id = stores["runs"][index]  # type: ignore[index]
    same(outputs(stores, ("report", run_id, *form)))


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: " ".join(w) or "all time")
@pytest.mark.parametrize("form", REPORT_FORMS, ids=lambda f: " ".join(f) or "table")
@pytest.mark.parametrize("by", GROUP_BY)
def test_aggregate_forms(stores: dict[str, object], by: str, form: tuple[str, ...], window: tuple[str, ...]) -> None:
    same(outputs(stores, ("report", "--by", by, *window, *form)))


@pytest.mark.parametrize("form", EXPORT_FORMS, ids=lambda f: " ".join(f))
def test_export_forms(stores: dict[str, object], form: tuple[str, ...]) -> None:
    same(outputs(stores, ("export", "--all", *form)))


def test_the_stores_hold_the_same_rows(stores: dict[str, object]) -> None:
    """The premise: the copy is exact, and both verify."""
    for run_id in stores["runs"]:  # type: ignore[attr-defined]
        views = []
        for url in stores["urls"].values():  # type: ignore[attr-defined]
            with Store.open(url) as store:
                assert store.verify(run_id).ok
                views.append(store.trajectory(run_id))
        assert views[0] == views[1]


def totals_rows(url: str) -> list[tuple[object, ...]]:
    with Store.open(url) as store, store.read() as conn:
        rows = [r for t in (*run_totals.DERIVED, ttft_days.DAYS) for r in conn.execute(select(t)).mappings().all()]
    return sorted((tuple(v for k, v in r.items() if k != "id") for r in rows), key=repr)


def test_both_backends_hold_the_same_totals(stores: dict[str, object]) -> None:
    """SQLite's, written as each run finished, and PostgreSQL's, computed by its own SQL (with
    the per-day TTFT rollup: SQLite's kept run by run, PostgreSQL's from one write of all runs)."""
    urls = stores["urls"]  # type: ignore[index]
    lite, pg = totals_rows(urls["sqlite"]), totals_rows(urls["postgresql"])  # type: ignore[index]
    assert lite and pg == lite


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("include_replays", [False, True])
@pytest.mark.parametrize("by", GROUP_BY)
def test_totals_and_rows_give_the_same_slices(stores: dict[str, object], backend: str, by: str,
                                              include_replays: bool) -> None:
    with Store.open(stores["urls"][backend], readonly=True) as store:  # type: ignore[index]
        assert read_slices(store, by=by, since=None, until=None, include_replays=include_replays) == read_slices(
            store, by=by, since=None, until=None, include_replays=include_replays, raw=True)
