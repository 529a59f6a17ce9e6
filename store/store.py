"""The Store: one opened trajectory database, its schema checked or migrated.

Reads go through ``read()`` (deferred transactions, a ``mode=ro`` connection
on SQLite); writes through ``write()`` (BEGIN IMMEDIATE). Database errors are
turned into typed StoreErrors at this boundary.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy import exc as sa_exc

from orchestrator.envelope import Envelope
from orchestrator.token_drift import Decode, RunTokens
from orchestrator.trajectory import (
    CallView,
    CandidateView,
    EventView,
    RunSummary,
    RunView,
    ToolExecutionView,
    Trajectory,
    TurnView,
)
from store.chain import ChainCheck
from store.check import token_check, totals_check, verify
from store.engine import ensure_parent, make_engine, parse_url, probe_file, sqlite_path, use_wal
from store.errors import (
    NotAStore,
    RecordingError,
    RollupMismatch,
    RunNotFound,
    SchemaTooNew,
    SchemaTooOld,
    StoreDamaged,
    StoreError,
)
from store.read import browse, reader, request_texts, turn_browse
from store.read.browse import ChainPosition, Facets
from store.read.turn_browse import TurnIndexEntry, TurnSlice
from store.schema import migrations
from store.write import teacher_scores
from store.write.journal import JournaledRecorder
from store.write.teacher_scores import CallScore

T = TypeVar("T")


class Store:
    def __init__(self, url: str, reader_engine: Engine, writer_engine: Engine | None, version: int) -> None:
        self.url = url
        self._reader = reader_engine
        self._writer = writer_engine
        self.schema_version = version

    @classmethod
    def open(
        cls, url: str, *, create: bool = True, readonly: bool = False,
        synchronous: str = "FULL", busy_timeout_ms: int = 30_000, write_retries: int = 8,
    ) -> "Store":
        """Open (and, when allowed, create or migrate) the store at ``url``.

        ``readonly`` never writes, not even to migrate; ``create=False`` refuses
        a missing or empty store. Raises StoreNotFound, NotAStore,
        SchemaTooNew or SchemaTooOld with the location in the message."""
        parsed = parse_url(url)
        path = sqlite_path(parsed)
        shown = str(path) if path else parsed.render_as_string(hide_password=True)
        may_create = create and not readonly
        if path is not None and not probe_file(path, create=may_create):
            ensure_parent(path)
        reader_engine = make_engine(parsed, readonly=readonly, busy_timeout_ms=busy_timeout_ms)
        writer_engine = None if readonly else make_engine(
            parsed, readonly=False, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms,
            write_retries=write_retries)
        try:
            version = _prepare(writer_engine or reader_engine, shown, may_create=may_create, readonly=readonly)
        except BaseException:
            reader_engine.dispose()
            if writer_engine is not None:
                writer_engine.dispose()
            raise
        return cls(shown, reader_engine, writer_engine, version)

    def close(self) -> None:
        self._reader.dispose()
        if self._writer is not None:
            self._writer.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self._reader.dialect.name

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with translated(self.url), self._reader.connect() as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        if self._writer is None:
            raise StoreError(f"store {self.url} was opened read-only")
        with translated(self.url), self._writer.begin() as conn:
            yield conn

    # Readers: frozen views for replay, reports and the CLI.

    def resolve(self, ref: str) -> str:
        """The full id of the run ``ref`` names (an id or a unique prefix)."""
        with self.read() as conn:
            return reader.resolve_run_id(conn, ref)

    def matching_runs(self, ref: str, *, limit: int) -> list[str]:
        """The run whose id is ``ref``, else up to ``limit`` runs whose id starts with it."""
        with self.read() as conn:
            return reader.matching_run_ids(conn, ref, limit=limit)

    def run(self, ref: str) -> RunView:
        with self.read() as conn:
            return reader.get_run(conn, reader.resolve_run_id(conn, ref))

    def runs(self, *, status: str | None = None, verdict: str | None = None, model: str | None = None,
             since: float | None = None, until: float | None = None, limit: int = 50,
             now: float | None = None) -> list[RunSummary]:
        """Newest first; a run whose owner is gone reads ``crashed`` as of ``now`` (``store.read.liveness``)."""
        with self.read() as conn:
            return reader.list_runs(
                conn, status=status, verdict=verdict, model=model, since=since, until=until, limit=limit, now=now
            )

    def browse(self, wanted: browse.RunFilter) -> browse.RunPage:
        """One filtered, sorted page of runs with their totals (``escrow view``)."""
        return self._query(browse.page_runs, wanted)

    def facets(self) -> Facets:
        return self._query(browse.facets)

    def summaries(self, run_ids: list[str]) -> list[RunSummary]:
        return self._query(browse.summaries, run_ids)

    def chain_positions(self, run_id: str) -> list[ChainPosition]:
        return self._query(browse.chain_positions, run_id)

    def turn_index(self, run_id: str) -> list[TurnIndexEntry]:
        return self._query(turn_browse.turn_index, run_id)

    def turn_slice(self, run_id: str, first: int | None = None, last: int | None = None, *, tails: bool = True,
                   detail: bool = True, only: Collection[int] | None = None) -> TurnSlice:
        """Some turns of a run, read without the requests' text (``escrow view``)."""
        with self.read() as conn:
            return turn_browse.turn_slice(conn, run_id, first, last, tails=tails, detail=detail, only=only)

    def search_turns(self, run_id: str, text: str) -> list[int] | None:
        return self._query(turn_browse.search_turns, run_id, text)

    def request_outlines(self, pairs: list[tuple[str, str]]) -> dict[str, str]:
        return self._query(request_texts.request_outlines, pairs)

    def requests(self, call_ids: list[str]) -> dict[str, str]:
        return self._query(request_texts.requests, call_ids)

    def _query(self, fn: Callable[..., T], *args: Any) -> T:
        with self.read() as conn:
            return fn(conn, *args)

    def turns(self, run_id: str) -> list[TurnView]:
        return self._query(reader.turns, run_id)

    def calls(self, run_id: str) -> list[CallView]:
        return self._query(reader.calls, run_id)

    def candidates(self, run_id: str) -> list[CandidateView]:
        return self._query(reader.candidates, run_id)

    def tool_executions(self, run_id: str) -> list[ToolExecutionView]:
        return self._query(reader.tool_executions, run_id)

    def events(self, run_id: str, kind: str | None = None) -> list[EventView]:
        return self._query(reader.events, run_id, kind)

    def trajectory(self, ref: str) -> Trajectory:
        with self.read() as conn:
            return reader.trajectory(conn, reader.resolve_run_id(conn, ref))

    def run_tokens(self, run_id: str, *, decode: Decode | None = None, vocab_size: int | None = None) -> RunTokens:
        """The drift check of a run's token ids (``escrow tokens``), from its responses alone."""
        with self.read() as conn:
            return token_check.run_tokens(conn, run_id, decode=decode, vocab_size=vocab_size)

    def answered_envelopes(self, run_id: str) -> list[tuple[str, int | None, Envelope]]:
        """The run's answered calls (call id, turn, envelope with whole ids), in chain order."""
        return self._query(teacher_scores.answered, run_id)

    def teacher_scores(self, run_id: str, teacher_model: str | None = None,
                       top_k: int | None = None) -> list[dict[str, Any]]:
        """The run's teacher score rows (``escrow score``), in chain order."""
        return self._query(teacher_scores.scores, run_id, teacher_model, top_k)

    def record_teacher_scores(self, scores: Sequence[CallScore]) -> None:
        """Append the calls' teacher scores to their runs' chains, all in one
        transaction; RecordingError (nothing written) when one names a call its
        run did not make in that turn."""
        recorder = self.recorder()
        recorder.commit_runs(teacher_scores.by_run(scores, recorder.clock()))

    def check_totals(self, run_id: str) -> None:
        """Raise RollupMismatch when the run's stored totals (what aggregate
        reports sum) differ from what its rows add up to: one of them was
        altered. A run without totals has nothing to differ."""
        with self.read() as conn:
            found = totals_check.problems(conn, run_id)
        if found:
            raise RollupMismatch([run_id], detail=found[run_id])

    def verify(self, ref: str) -> ChainCheck:
        """Check one run (id or unique prefix). A run whose row was deleted is
        still found, and reported broken, through the rows it left behind."""
        with self.read() as conn:
            try:
                run_id = reader.resolve_run_id(conn, ref)
            except RunNotFound:
                run_id = ref
            check = verify.verify_run(conn, run_id)
        if check is None:
            raise RunNotFound(f"no run matches {ref!r}", ref=ref)
        return check

    def recorder(self, *, clock: Callable[[], float] = time.time) -> JournaledRecorder:
        """A Recorder writing into this store that also hands out journals
        (replay records through it)."""
        return JournaledRecorder(self, clock=clock)

    def verify_all(self) -> list[ChainCheck]:
        """Every run's chain, then any rows left behind by a deleted run."""
        with self.read() as conn:
            return verify.verify_all(conn)

    def check_pages(self) -> None:
        """StoreDamaged unless SQLite's ``quick_check`` finds every page of
        the file sound (verify reads the tables; this covers the indexes and
        free pages it does not read)."""
        problem = self.integrity_check(quick=True)
        if problem != "ok":
            raise StoreDamaged(f"damaged store {self.url}: SQLite's quick_check reports: {problem[:500]}",
                               location=self.url)

    def integrity_check(self, *, quick: bool = False) -> str:
        """SQLite's own ``PRAGMA integrity_check`` or ``quick_check`` ("ok" when sound)."""
        if self.dialect != "sqlite":
            return "ok"
        with self.read() as conn:
            pragma = "quick_check" if quick else "integrity_check"
            return "\n".join(str(r[0]) for r in conn.execute(text(f"PRAGMA {pragma}")))


def _prepare(engine: Engine, shown: str, *, may_create: bool, readonly: bool) -> int:
    with translated(shown):
        with engine.connect() as conn:
            version = migrations.current_version(conn)
            foreign = [t for t in inspect(conn).get_table_names() if not t.startswith("sqlite_")]
        if version is None:
            if foreign:
                raise NotAStore(f"{shown} holds a database that is not an Escrow store", location=shown)
            if not may_create:
                raise NotAStore(f"{shown} holds no Escrow store", location=shown)
            use_wal(engine)
            migrations.create_latest(engine)
            return migrations.LATEST
        if version > migrations.LATEST:
            raise SchemaTooNew(
                f"{shown} has schema version {version}, newer than this Escrow's {migrations.LATEST}; upgrade Escrow "
                "to read it",
                location=shown,
                version=version,
            )
        if version < migrations.LATEST and readonly:
            raise SchemaTooOld(
                f"{shown} has schema version {version}; run `escrow migrate` to bring it to {migrations.LATEST}",
                location=shown, version=version,
            )
        if not readonly:
            use_wal(engine)
        if version < migrations.LATEST:
            migrations.upgrade(engine, version)
        return migrations.LATEST


# What SQLite says when a page it reads is damaged.
DAMAGE_SIGNS = ("not a database", "malformed", "encrypted", "corrupt", "disk I/O error", "out of range")


@contextmanager
def translated(location: str) -> Iterator[None]:
    """Database errors become StoreErrors that say where and what."""
    try:
        yield
    except UnicodeDecodeError as exc:  # a damaged page inside a text cell
        raise StoreDamaged(f"damaged store {location}: a text cell is not valid UTF-8 ({exc.reason})",
                           location=location) from exc
    except sa_exc.IntegrityError as exc:
        raise RecordingError(f"{location}: write refused: {exc.orig}", location=location) from exc
    except sa_exc.DBAPIError as exc:
        detail = str(exc.orig)
        if any(s in detail for s in DAMAGE_SIGNS):
            raise StoreDamaged(f"damaged store {location}: {detail}", location=location) from exc
        raise StoreError(f"store {location}: {detail}", location=location) from exc

