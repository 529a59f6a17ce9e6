"""The viewer's pages, rendered from a read-only Store. Shared by the local
server (app.py) and the static bundle (export.py), so both show the same."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlencode

from cli.view import batch_pages
from cli.view.compare import Comparison, align, first_divergent_turn, request_pairs, with_requests
from cli.view.jinja_pages import Links, Renderer, marked, text_block
from cli.view.pages import matching, run_shown
from cli.view.shown import RunShown
from orchestrator.trajectory import Trajectory
from store import ChainCheck, Store
from store.read.browse import SORT_KEYS, RunFilter
from store.read.turn_browse import TurnIndexEntry
from store.write import batches as bstore

FILTER_KEYS = (
    "verdict",
    "model",
    "batch",
    "q",
    "since",
    "until",
    "min_cost",
    "max_cost",
    "min_turns",
    "max_turns",
    "sort",
    "order",
)
PER_PAGE = 50
TURNS_PER_PAGE = 50


def _day(value: str) -> float:
    moment = datetime.fromisoformat(value)
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def parse_filter(params: Mapping[str, str]) -> tuple[RunFilter, list[str]]:
    """A RunFilter from query parameters, and a note for each value ignored
    (the page then answers 400: the runs listed are not the ones asked for)."""
    problems: list[str] = []
    values: dict[str, object] = {}

    def take(key: str, convert: Callable[[str], object], target: str) -> None:
        raw = (params.get(key) or "").strip()
        if not raw:
            return
        try:
            values[target] = convert(raw)
        except ValueError:
            problems.append(f"ignored {key}={raw!r}: not a valid value")

    for key in ("verdict", "model", "batch"):
        take(key, str, key)
    take("q", str, "text")
    take("since", _day, "since")
    take("until", _day, "until")
    take("min_cost", float, "min_cost")
    take("max_cost", float, "max_cost")
    take("min_turns", int, "min_turns")
    take("max_turns", int, "max_turns")
    take("page", int, "page")
    for key in params:
        if key not in (*FILTER_KEYS, "page", "run"):
            swapped = "_".join(reversed(key.split("_")))  # cost_min for min_cost
            close = [swapped] if swapped in FILTER_KEYS else difflib.get_close_matches(key, FILTER_KEYS, n=1)
            hint = f"did you mean {close[0]}?" if close else f"the filters are {', '.join(FILTER_KEYS)}"
            problems.append(f"ignored {key}={params.get(key)!r}: no such filter; {hint}")
    sort = params.get("sort") or "started"
    if sort not in SORT_KEYS:
        problems.append(f"ignored sort={sort!r}: sort by one of {', '.join(SORT_KEYS)}")
        sort = "started"
    values["sort"] = sort
    values["descending"] = params.get("order", "desc") != "asc"
    return RunFilter.model_validate({**values, "per_page": PER_PAGE}), problems


@dataclass(frozen=True)
class SearchPages:
    """Where a search within a run stands: the candidate turns SQL found,
    read ``TURNS_PER_PAGE`` at a time."""

    candidates: int
    chunks: list[tuple[int, int]]
    """First and last candidate turn of each page."""
    page: int
    narrowed: bool
    """False when the query has no plain word to narrow by: every turn is a candidate."""
    per_page: int = TURNS_PER_PAGE


class Site:
    def __init__(self, store: Store, links: Links) -> None:
        self.store = store
        self.render = Renderer(links)
        self._checks: dict[tuple[str, int, str], ChainCheck] = {}
        self.bundled: set[str] | None = None
        """The runs a static bundle holds (links to others are left out)."""

    def run_link(self, run_id: str) -> str | None:
        return self.render.links.run(run_id) if self.bundled is None or run_id in self.bundled else None

    def check(self, run_id: str, chain_seq: int, chain_head: str) -> ChainCheck:
        """The run's chain check, kept while its head is unchanged."""
        key = (run_id, chain_seq, chain_head)
        if key not in self._checks:
            self._checks[key] = self.store.verify(run_id)
        return self._checks[key]

    def known_check(self, run_id: str, chain_seq: int, chain_head: str) -> ChainCheck | None:
        """The run's chain check if it was made while its head was as it is
        now; a served page without it shows the check in a frame, which makes
        it after the page is sent (verifying a long chain costs more than the
        page). The static bundle always checks: it has no server to ask."""
        if self.render.links.static:
            return self.check(run_id, chain_seq, chain_head)
        return self._checks.get((run_id, chain_seq, chain_head))

    def chain_status_page(self, ref: str) -> str:
        run = self.store.run(ref)
        return self.render.page("chain_status.html", run=run, check=self.check(run.id, run.chain_seq, run.chain_head))

    def runs_page(self, params: Mapping[str, str]) -> str:
        wanted, problems = parse_filter(params)
        found = self.store.browse(wanted)
        kept = {k: params[k] for k in FILTER_KEYS if params.get(k)}

        def page_link(number: int) -> str:
            return "?" + urlencode({**kept, "page": number})

        def sort_link(key: str) -> str:
            order = "asc" if wanted.sort == key and wanted.descending else "desc"
            return "?" + urlencode({**kept, "sort": key, "order": order})

        return self.render.page(
            "runs.html", page=found, facets=self.store.facets(), params=kept, problems=problems, filter=wanted,
            page_link=page_link, sort_link=sort_link, sort_keys=SORT_KEYS,
        )

    def static_runs_page(self, run_ids: list[str]) -> str:
        """The bundle's index: the exported runs, filtered in the page itself."""
        found = self.store.summaries(run_ids)
        return self.render.page("runs_static.html", runs=found, facets=self.store.facets())

    def run_page(self, ref: str, query: str | None = None, page: int | None = None, *,
                 internals: bool = False) -> str:
        """A run's turns, ``TURNS_PER_PAGE`` at a time when served (the bundle,
        with no server to ask for more, has all of them on one page): the
        transcript, or with ``internals`` every turn's escrow rows open."""
        run_id = self.store.resolve(ref)
        index = self.store.turn_index(run_id)
        pages = [index[i:i + TURNS_PER_PAGE] for i in range(0, len(index), TURNS_PER_PAGE)] or [[]]
        if query and not self.render.links.static:
            return self.search_page(run_id, query, page or 1, index, pages, internals=internals)
        number = min(max(1, page or 1), len(pages))
        shown_turns = pages[number - 1] if not (query or self.render.links.static) else []
        if shown_turns:
            part = self.store.turn_slice(run_id, shown_turns[0].turn, shown_turns[-1].turn)
        else:
            part = self.store.turn_slice(run_id)
        return self.render_run(part.trajectory, run_shown(part.trajectory, part.appended_before, part.last_messages),
                               query, index=index, pages=pages if shown_turns else [], page=number,
                               internals=internals)

    def search_page(self, run_id: str, query: str, page: int, index: list[TurnIndexEntry],
                    pages: list[list[TurnIndexEntry]], *, internals: bool = False) -> str:
        """The turns of a run whose text contains ``query``. SQL narrows the
        turns to those whose rows contain the query's longest plain word
        (``Store.search_turns``); only those are read, ``TURNS_PER_PAGE`` a
        page, and kept when their shown text contains the whole query."""
        found = self.store.search_turns(run_id, query)
        candidates = [e.turn for e in index] if found is None else found
        chunks = [candidates[i:i + TURNS_PER_PAGE] for i in range(0, len(candidates), TURNS_PER_PAGE)] or [[]]
        number = min(max(1, page), len(chunks))
        part = self.store.turn_slice(run_id, only=chunks[number - 1])
        shown = run_shown(part.trajectory, None, part.last_messages, part.appended)
        search = SearchPages(candidates=len(candidates), chunks=[(c[0], c[-1]) for c in chunks if c], page=number,
                             narrowed=found is not None)
        return self.render_run(part.trajectory, shown, query, index=index, pages=pages, page=1, search=search,
                               internals=internals)

    def render_run(self, trajectory: Trajectory, shown: RunShown, query: str | None, *, index: list[TurnIndexEntry],
                   pages: list[list[TurnIndexEntry]], page: int, search: SearchPages | None = None,
                   internals: bool = False) -> str:
        """The run page; a served search's hits are marked in the text, and
        each disclosure holding one is open (the bundle's script does the same)."""
        run = trajectory.run
        served_query = None if self.render.links.static else query
        totals = self.store.summaries([run.id])[0].totals
        page_of = {e.turn: n for n, chunk in enumerate(pages, 1) for e in chunk}
        return self.render.page(
            "run.html",
            run=run,
            shown=shown,
            turns=matching(shown.turns, query),
            query=query or "",
            check=self.known_check(run.id, run.chain_seq, run.chain_head),
            totals=totals,
            token_check=self.store.run_tokens(run.id),
            index=index,
            pages=[] if search else pages,
            page=page,
            page_of=page_of,
            search=search,
            internals=internals,
            attempt=bstore.attempt_of_run(self.store, run.id),
            hl=lambda text: marked(text, served_query),
            text_block=lambda text, label="output": text_block(text, label, served_query),
        )

    def chain_page(self, ref: str) -> str:
        run = self.store.run(ref)
        return self.render.page("chain.html", run=run, rows=self.store.chain_positions(run.id),
                                check=self.check(run.id, run.chain_seq, run.chain_head))

    def compare_page(self, a: str, b: str) -> str:
        left, right = (
            self.store.turn_slice(self.store.resolve(ref), tails=False, detail=False).trajectory for ref in (a, b)
        )
        comparison = self.aligned(left, right)
        checks = [
            (t.run.id, self.known_check(t.run.id, t.run.chain_seq, t.run.chain_head))
            for t in (comparison.a, comparison.b)
        ]
        return self.render.page("compare.html", cmp=comparison, checks=checks)

    def batches_page(self, page: int = 1, ids: list[str] | None = None) -> str:
        reports, pages = batch_pages.listed(self.store, page, ids)
        return self.render.page("batches.html", reports=reports, page=page, pages=pages)

    def batch_page(self, ref: str) -> str:
        return self.render.page("batch.html", b=batch_pages.batch_shown(self.store, ref), run_link=self.run_link)

    def aligned(self, left: Trajectory, right: Trajectory) -> Comparison:
        """The two runs aligned. Only the first divergent turn's requests are
        read whole (its diff is shown); every other turn whose requests differ
        is compared through outlines (``Store.request_outlines``), which name
        the same first differing field without reading the histories."""
        pairs = request_pairs(left, right)
        # A turn where one run made no call compares a request with nothing: read whole.
        divergent = first_divergent_turn(left, right)
        whole = {t for t, p in pairs.items() if t == divergent or None in p}
        while True:
            outlined = [(x, y) for t, (x, y) in pairs.items() if t not in whole and x is not None and y is not None]
            texts = {**self.store.request_outlines(outlined),
                     **self.store.requests([c for t in whole for c in pairs[t] if c is not None])}
            comparison = align(with_requests(left, texts), with_requests(right, texts))
            first = comparison.first_divergence
            if first is None or first.turn in whole or first.turn not in pairs:
                return comparison
            whole.add(first.turn)  # the hashes differed at an earlier turn whose parsed requests did not

    def in_order(self, x: str, y: str) -> tuple[str, str]:
        """Two runs picked on the runs page, as the compare page takes them:
        the original first when one was made from the other, else the older."""
        a, b = sorted((self.store.run(x), self.store.run(y)), key=lambda r: (r.created_at, r.id))
        return (b.id, a.id) if a.parent_run_id == b.id else (a.id, b.id)

    def compare_form(self, problem: str | None = None) -> str:
        return self.render.page("compare_form.html", problem=problem)

    def error_page(self, title: str, message: str) -> str:
        return self.render.page("error.html", title=title, message=message)

