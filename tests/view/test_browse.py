"""The viewer's reads and pure parts without a browser: paginated run
pages against plain SQL counts, the batch filter before batches exist, and
the order in which a comparison names a divergence."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cli.view.compare import difference
from cli.view.site import parse_filter
from store import Store
from store.read.browse import RunFilter
from store.write import synthetic


@pytest.fixture
def small(db_path: Path) -> Path:
    with Store.open(f"sqlite:///{db_path}", synchronous="OFF") as store:
        synthetic.record_many(store, 30, turns=3, seed=4)
    return db_path


def sql_ids(db: Path, where: str, order: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute(f"SELECT id FROM runs r WHERE {where} ORDER BY {order}")]


TURNS = "(SELECT COUNT(*) FROM turns t WHERE t.run_id = r.id)"
COST = "(SELECT COALESCE(SUM(cost_usd), 0) FROM model_responses m WHERE m.run_id = r.id)"


@pytest.mark.parametrize(
    ("wanted", "where", "order"),
    [
        (RunFilter(), "1", "created_at DESC, id DESC"),
        (RunFilter(descending=False), "1", "created_at ASC, id ASC"),
        (RunFilter(verdict="PASS"), "verdict = 'PASS'", "created_at DESC, id DESC"),
        (
            RunFilter(model="qwen3-0.6b", text="#1"),
            "\"gen_ai.request.model\" = 'qwen3-0.6b' AND task LIKE '%#1%'",
            "created_at DESC, id DESC",
        ),
        (RunFilter(text="100%_"), "0", "id"),  # LIKE wildcards in the search are literal
        (RunFilter(min_turns=2, max_turns=2), f"{TURNS} = 2", "created_at DESC, id DESC"),
        (RunFilter(sort="turns"), "1", f"{TURNS} DESC, created_at DESC, id DESC"),
        (
            RunFilter(sort="cost", descending=False, max_cost=0.0004),
            f"{COST} <= 0.0004",
            f"{COST} ASC, created_at DESC, id ASC",
        ),
        (
            RunFilter(since=1_700_000_000 + 5 * 3600, until=1_700_000_000 + 9 * 3600),
            "created_at >= 1700018000 AND created_at < 1700032400",
            "created_at DESC, id DESC",
        ),
    ],
)
def test_pages_match_plain_sql(small: Path, wanted: RunFilter, where: str, order: str) -> None:
    expected = sql_ids(small, where, order)
    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        got: list[str] = []
        for number in range(1, 5):
            page = store.browse(wanted.model_copy(update={"page": number, "per_page": 8}))
            assert page.total == len(expected)
            got += [s.run.id for s in page.runs]
    assert got == expected[:32]


def test_the_batch_filter_lists_batches_and_keeps_their_runs(small: Path) -> None:
    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        assert store.facets().batches == ()
        assert store.browse(RunFilter(batch="b1")).total == 0
        run_id = store.runs(limit=1)[0].run.id
    with sqlite3.connect(small) as conn:
        conn.execute(
            "INSERT INTO batches (id, created_at, task_file, n_tasks, settings_json) VALUES ('b1', 0, 't', 1, '{}')"
        )
        conn.execute("INSERT INTO batch_attempts (id, batch_id, task_id, number, run_id, outcome, started_at) "
                     "VALUES ('a1', 'b1', 'task', 1, ?, 'model', 0)", (run_id,))
    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        assert store.facets().batches == ("b1",)
        page = store.browse(RunFilter(batch="b1"))
        assert page.total == 1 and [r.run.id for r in page.runs] == [run_id]


def test_bad_filter_values_are_ignored_with_a_note() -> None:
    wanted, problems = parse_filter({"min_cost": "cheap", "since": "yesterday", "sort": "DROP TABLE", "max_turns": "3"})
    assert wanted.min_cost is None and wanted.since is None and wanted.sort == "started" and wanted.max_turns == 3
    assert len(problems) == 3 and any("min_cost" in p for p in problems)


def test_a_comparison_names_the_request_before_what_follows(small: Path) -> None:
    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        runs = [store.trajectory(s.run.id) for s in store.runs(limit=30)]
    a = next(t for t in runs if len(t.turns) >= 2)
    # Turns 0 and 1 differ in their requests' seed and history, and in their
    # answers: the request is named first, at its settings before its messages.
    found = difference(a.turns[0], a.turns[1])
    assert found is not None and (found.kind, found.field) == ("request", "sampling.seed")
    assert any(f.startswith("messages") for f in found.fields)
    assert difference(a.turns[0], a.turns[0]) is None
    gone = difference(a.turns[0], None)
    assert gone is not None and gone.kind == "exhausted"


@pytest.mark.parametrize(
    ("query", "named"),
    [("cost_min=0.5", "did you mean min_cost?"), ("min_cost=cheap", "min_cost='cheap'")],
)
def test_a_bad_or_unknown_filter_is_a_400_that_names_it(small: Path, query: str, named: str) -> None:
    """A misspelt filter (``?cost_min=``) was ignored silently: the page listed
    every run as if filtered. Now the page says what it left out, with a 400."""
    from starlette.testclient import TestClient

    from cli.view.app import create_app

    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        answer = TestClient(create_app(store)).get(f"/?{query}")
        assert answer.status_code == 400
        assert named.replace("'", "&#39;") in answer.text
        assert TestClient(create_app(store)).get("/?min_cost=0.5&page=1").status_code == 200


def test_a_verified_chain_is_said_on_every_view_not_the_first_alone(small: Path) -> None:
    """The first view's frame said "Hash chain verified"; once the check was
    kept, later views said nothing of it (only a broken chain had a banner)."""
    from cli.view.jinja_pages import Links
    from cli.view.site import Site

    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        run_id = store.runs(limit=1)[0].run.id
        site = Site(store, Links(static=False))
        first = site.run_page(run_id, None, 1)
        assert 'class="chain-status"' in first and "Hash chain verified" not in first  # checked in its frame
        framed = site.chain_status_page(run_id)
        again = site.run_page(run_id, None, 1)
        said = framed.split('id="chain-verified">', 1)[1].split("</div>", 1)[0]
        assert 'class="chain-status"' not in again and f'id="chain-verified">{said}</div>' in again


def test_a_turn_s_header_names_its_input_tokens(small: Path) -> None:
    """The header gave cached, prefilled and output tokens, never the input."""
    import re

    from cli.view.jinja_pages import Links
    from cli.view.site import Site

    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        run_id = store.runs(limit=1)[0].run.id
        trajectory = store.trajectory(run_id)
        page = Site(store, Links(static=False)).run_page(run_id, None, 1)
    record = next(r for r in trajectory.turns if any(c.response for c in r.calls))
    expected = sum(c.response.input_tokens for c in record.calls if c.response)
    header = page.split(f'id="turn-{record.turn}"', 1)[1].split("</header>", 1)[0]
    assert re.search(rf"tokens input {expected:,} · cached ", header), header


def test_a_search_speaks_of_matches_not_of_how_it_finds_them(small: Path) -> None:
    """It said "N turns hold the query's longest word and are checked"."""
    from cli.view.jinja_pages import Links
    from cli.view.site import Site

    with Store.open(f"sqlite:///{small}", create=False, readonly=True) as store:
        run_id = store.runs(limit=1)[0].run.id
        page = Site(store, Links(static=False)).run_page(run_id, "turn contents", 1)
    assert "turns match" in page
    for implementation in ("longest word", "are checked", "is checked", "candidate turn"):
        assert implementation not in page
