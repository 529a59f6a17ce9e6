"""Engine set-up, and the checks made on a SQLite file before SQLite opens it.

SQLite: WAL, a busy timeout, foreign keys, and ``synchronous`` (FULL by
default: a committed turn survives power loss, not only a crash). pysqlite's
own transaction handling is switched off so that SQLAlchemy emits the BEGIN:
``BEGIN IMMEDIATE`` for writers, which take the write lock up front instead
of failing with SQLITE_BUSY when a read turns into a write. Readers use
``mode=ro`` connections and a plain BEGIN.

SQLite's busy handler is not fair: with dozens of processes writing one file
on few cores, one writer can wait past the busy timeout while others take the
lock again and again. So a writer's BEGIN IMMEDIATE that still finds the file
locked is retried, ``write_retries`` times, after a random (jittered), growing
pause. Only the BEGIN is retried: nothing of the transaction has run yet.

The same models run on PostgreSQL; there writers lock the run row instead.
"""

from __future__ import annotations

import os
import random
import sqlite3
import struct
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import ClauseElement

from store.errors import NotAStore, StoreNotFound

SQLITE_MAGIC = b"SQLite format 3\x00"
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL; None for other backends."""
    if url.get_backend_name() != "sqlite":
        return None
    if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
        raise NotAStore(f"store URL {url.render_as_string()} must name a SQLite file", url=str(url))
    return Path(url.database).expanduser()


def probe_file(path: Path, *, create: bool) -> bool:
    """Check a SQLite file before opening it, reading only. Returns True when
    it exists with content. Raises for a missing file (unless ``create``), a
    non-SQLite file, or a truncated one."""
    if not path.exists():
        if create:
            return False
        raise StoreNotFound(f"no store at {path} (nothing has been recorded there yet)", path=str(path))
    if path.is_dir():
        raise NotAStore(f"{path} is a directory, not a store file", path=str(path))
    size = path.stat().st_size
    if size == 0:
        if create:
            return False
        raise NotAStore(f"{path} is empty, not an Escrow store", path=str(path))
    with path.open("rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise NotAStore(f"{path} is not a SQLite database", path=str(path))
    problem = header_problem(header, size, wal_present=_wal_has_frames(path))
    if problem:
        raise NotAStore(f"{path} is damaged: {problem}", path=str(path))
    return True


def header_problem(header: bytes, size: int, *, wal_present: bool) -> str | None:
    """What the 100-byte header says is wrong with a file of ``size`` bytes."""
    (page_size,) = struct.unpack(">H", header[16:18])
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return f"invalid page size {page_size}"
    if size % page_size:
        return f"size {size} is not a whole number of {page_size}-byte pages (truncated?)"
    change_counter, pages, valid_for = (struct.unpack(">I", header[o : o + 4])[0] for o in (24, 28, 92))
    # The in-header page count is only trusted when written by a recent SQLite,
    # and an active WAL may legitimately hold pages beyond the main file.
    if not wal_present and change_counter == valid_for and pages * page_size > size:
        return f"truncated: header says {pages} pages, file holds {size // page_size}"
    return None


def _wal_has_frames(path: Path) -> bool:
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size > 32
    except FileNotFoundError:
        return False


def make_engine(
    url: URL, *, readonly: bool, synchronous: str = "FULL", busy_timeout_ms: int = 30_000, write_retries: int = 8
) -> Engine:
    path = sqlite_path(url)
    if path is None:
        options = {"postgresql_readonly": True} if readonly and url.get_backend_name() == "postgresql" else {}
        return create_engine(url, pool_pre_ping=True, execution_options=options)
    if synchronous.upper() not in SYNCHRONOUS:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS}")
    target = f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true" if readonly else url
    engine = create_engine(target, connect_args={"timeout": busy_timeout_ms / 1000})
    begin = "BEGIN" if readonly else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        # Stricter checks of every page read: damage is reported, not read as data.
        cursor.execute("PRAGMA cell_size_check = ON")
        if not readonly:
            cursor.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        if readonly or not begin_immediate(conn.connection.driver_connection, write_retries):
            conn.exec_driver_sql(begin)  # the last try: its error reaches the caller as a StoreError

    return engine


def begin_immediate(connection: sqlite3.Connection, tries: int) -> bool:
    """Up to ``tries`` BEGIN IMMEDIATEs, each after a jittered, growing pause
    while the file stays locked past the busy timeout. False when all found
    it locked (the caller makes the last try)."""
    for attempt in range(tries):
        try:
            connection.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            time.sleep(random.uniform(0.0, min(2.0, 0.05 * 2**attempt)))
    return False


def parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except Exception as exc:  # SQLAlchemy raises ArgumentError and ValueError variants
        raise NotAStore(f"invalid store URL {url!r}: {exc}", url=url) from exc


def ensure_parent(path: Path) -> None:
    os.makedirs(path.parent, exist_ok=True)


def use_wal(engine: Engine) -> None:
    """Switch a SQLite store to WAL (a persistent property of the file). Done
    only once the file is known to be an Escrow store or a new one, so a
    foreign database is never modified."""
    if engine.dialect.name != "sqlite":
        return
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()
    finally:
        raw.close()


def driver_rows(conn: Connection, query: ClauseElement) -> list[tuple[Any, ...]]:
    """A query's rows as the database driver returns them: plain tuples,
    without SQLAlchemy's result rows or type processing. For fleet reads of
    tens of thousands of rows. The driver's values come back as stored: no
    result processing (an escaped text column's cells stay escaped, for the
    caller to unescape), and the caller checks the cells' types."""
    compiled: Any = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    # Each parameter gets its type's bind processing, as SQLAlchemy gives it
    # (a value compared with an escaped text column is escaped).
    process = {name: proc for name, bind in compiled.binds.items()
               if (proc := bind.type.bind_processor(conn.dialect)) is not None}
    params = {name: process[name](value) if name in process else value
              for name, value in compiled.construct_params().items()}
    args = tuple(params[name] for name in compiled.positiontup or ()) if compiled.positional else params
    statement, driver_error = str(compiled), conn.dialect.loaded_dbapi.Error
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(statement, args)
        rows: list[tuple[Any, ...]] = cursor.fetchall()  # tuples: both drivers' default rows
        return rows
    except driver_error as exc:
        # As SQLAlchemy raises it, so the store's one translation names it (a damaged page, a lost server).
        raise DBAPIError.instance(statement, args, exc, driver_error) from exc
    finally:
        cursor.close()
