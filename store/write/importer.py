"""The store side of ``escrow import``: a source file's trajectories become
runs with ``mode = "import"``, their rows built by ``store.write.import_rows``.

Each run's genesis (its ``config_json``) records the source file's sha256,
path, format and version, so its chain starts at the import. A run is new,
so its chain starts from its genesis: every link is computed here, the run
row is inserted closed with its head, and the rows of all the files of one
transaction go in one statement per table (``write``), not a round trip per
row or per run. Re-importing a file (same sha256) is a no-op unless ``again``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Connection, func, select

from orchestrator import __version__
from orchestrator.contract import Frozen
from orchestrator.interop import (
    FormatMismatch,
    ReadLimits,
    SourceError,
    SourceTooLarge,
    SourceTrajectory,
    UnreadableSource,
    read_folder,
    read_trajectories,
)
from orchestrator.interop.openhands_v1 import wanted
from orchestrator.interop.records import IMPORT_MODE
from store.schema.tables import Run, table_of
from store.store import Store
from store.write import rows as build
from store.write import totals_write
from store.write.blobs import put as put_blobs
from store.write.import_rows import IMPORTED_VERDICT, first_time, last_time, trajectory_rows
from store.write.writer import Chained, chained, insert_chained

__all__ = ["IMPORTED_VERDICT", "ImportOutcome", "import_file", "import_files"]

RUNS = table_of(Run)
SHA_KEY = '"sha256":"'
"""How the source's sha256 is keyed in a run's canonical ``config_json``
(its first such text: a string value's quotes are escaped)."""
LOOKUP_BATCH = 100


class ImportOutcome(Frozen):
    path: str
    sha256: str
    format: str | None = None
    version: str | None = None
    run_ids: tuple[str, ...] = ()
    skipped: bool = False
    calls: int = 0


def read_folder_source(path: Path, limits: ReadLimits) -> tuple[dict[str, bytes], str]:
    """An OpenHands V1 conversation folder's files (by relative path) and
    the sha256 of its manifest (each file's path and sha256, in path order),
    all of them together under the size cap."""
    try:
        found = sorted(p for p in path.rglob("*") if p.is_file() and wanted(p.relative_to(path).as_posix()))
    except OSError as exc:
        raise UnreadableSource(f"cannot read {path}: {exc.strerror or exc}", path=str(path)) from None
    if not found:
        raise FormatMismatch(
            f"{path} is a directory but not an OpenHands V1 conversation folder (base_state.json and "
            "events/event-*.json); give trajectory files", path=str(path))
    files, manifest, total = {}, hashlib.sha256(), 0
    for file in found:
        data, digest = read_source(file, limits.model_copy(update={"max_file_bytes": limits.max_file_bytes - total}))
        total += len(data)
        relative = file.relative_to(path).as_posix()
        files[relative] = data
        manifest.update(f"{relative}\0{digest}\n".encode())
    return files, manifest.hexdigest()


def read_source(path: Path, limits: ReadLimits) -> tuple[bytes, str]:
    """The file's bytes and sha256, read in chunks under the size cap."""
    try:
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            raise SourceTooLarge(
                f"{path}: {size} bytes, over the cap of {limits.max_file_bytes} (see --max-mib)", path=str(path)
            )
        digest, chunks, total = hashlib.sha256(), [], 0
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
                if total > limits.max_file_bytes:  # the file grew while being read
                    raise SourceTooLarge(f"{path}: over the cap of {limits.max_file_bytes} bytes", path=str(path))
                digest.update(chunk)
                chunks.append(chunk)
    except OSError as exc:
        raise UnreadableSource(f"cannot read {path}: {exc.strerror or exc}", path=str(path)) from None
    return b"".join(chunks), digest.hexdigest()


def already_imported(conn: Connection, shas: Collection[str]) -> dict[str, list[str]]:
    """The runs already imported from each of these sources (by sha256), in
    the order they were created: one pass over the imported runs for up to
    ``LOOKUP_BATCH`` files."""
    at = (func.strpos if conn.dialect.name == "postgresql" else func.instr)(RUNS.c.config_json, SHA_KEY)
    recorded = func.substr(RUNS.c.config_json, at + len(SHA_KEY), 64)
    found: dict[str, list[str]] = {}
    wanted = sorted(set(shas))
    for start in range(0, len(wanted), LOOKUP_BATCH):
        stmt = (
            select(RUNS.c.id, recorded)
            .where(RUNS.c.mode == IMPORT_MODE, at > 0, recorded.in_(wanted[start:start + LOOKUP_BATCH]))
            .order_by(RUNS.c.created_at)
        )
        for run_id, sha256 in conn.execute(stmt):
            found.setdefault(str(sha256), []).append(str(run_id))
    return found


class Parsed(Frozen):
    """One source file read and parsed, not yet written."""

    path: str
    name: str
    sha256: str
    trajectories: tuple[SourceTrajectory, ...]


def parse_file(path: Path, fmt: str, limits: ReadLimits) -> Parsed:
    data: bytes | dict[str, bytes]
    data, sha256 = read_folder_source(path, limits) if path.is_dir() else read_source(path, limits)
    return _parsed(Parsed(path=str(path), name=path.name, sha256=sha256, trajectories=()), data, fmt, limits)


def _parsed(self: Parsed, data: bytes | dict[str, bytes], fmt: str, limits: ReadLimits) -> Parsed:
    trajectories = (read_folder(data, self.path, fmt) if isinstance(data, dict)
                    else read_trajectories(data, self.path, fmt, limits))
    if not trajectories:
        raise UnreadableSource(f"{self.path}: holds no trajectory", path=self.path)
    return self.model_copy(update={"trajectories": tuple(trajectories)})


class NewRun(NamedTuple):
    """One imported trajectory ready to insert: its run row (closed, holding
    its chain's head), its chained rows and the blobs they refer to."""

    run: dict[str, Any]
    rows: list[Chained]
    blobs: dict[str, str]


def new_runs(parsed: Parsed, now: float) -> list[NewRun]:
    """Pure: the runs of one parsed file, chained."""
    out = []
    for index, trajectory in enumerate(parsed.trajectories):
        run_id = build.new_run_id()
        meta = {
            "format": trajectory.format,
            "version": trajectory.version,
            "sha256": parsed.sha256,
            "file": parsed.name,
            "source_id": trajectory.source_id,
            "index": index,
        }
        started = trajectory.started_at or first_time(trajectory) or now
        run = build.run_row(
            # ``imported_at``: when it entered this store, what ``gc`` ages it by (``started`` is its source's).
            run_id=run_id, now=started, task=trajectory.task, repo=parsed.path,
            config={"import": {**meta, "imported_at": now}}, policy={},
            model=model_of(trajectory), mode=IMPORT_MODE, parent_run_id=None, forked_at_turn=None,
            version=__version__,
        )
        ended = trajectory.ended_at or last_time(trajectory) or started
        pending, blobs = trajectory_rows(run_id, trajectory, meta, started, ended)
        # A new run's chain starts at its genesis (seq 0), as the run row records it.
        rows, seq, head = chained(run_id, run["chain_seq"], run["chain_head"], pending)
        verdict = rows[-1][1]
        run.update(
            chain_seq=seq, chain_head=head, status="finished", verdict=IMPORTED_VERDICT,
            verdict_detail=json.loads(verdict["data_json"])["detail"], finished_at=verdict["at"],
        )
        out.append(NewRun(run, rows, blobs))
    return out


def model_of(trajectory: SourceTrajectory) -> str:
    return (
        trajectory.model
        or next((m.call.model for m in trajectory.messages if m.call and m.call.model), None)
        or "unknown"
    )


def write(conn: Connection, runs: Sequence[NewRun]) -> None:
    """Insert new runs in the caller's transaction (their totals are the
    caller's): one statement for the run rows, one per blob batch, one per
    chained table."""
    if not runs:
        return
    conn.execute(RUNS.insert(), [r.run for r in runs])
    put_blobs(conn, {k: v for r in runs for k, v in r.blobs.items()})
    insert_chained(conn, [row for r in runs for row in r.rows])


def outcome(parsed: Parsed, run_ids: Sequence[str]) -> ImportOutcome:
    first = parsed.trajectories[0]
    return ImportOutcome(path=parsed.path, sha256=parsed.sha256, format=first.format, version=first.version,
                         run_ids=tuple(run_ids), calls=sum(t.calls for t in parsed.trajectories))


def import_files(
    store: Store,
    paths: Sequence[Path],
    *,
    fmt: str = "auto",
    again: bool = False,
    limits: ReadLimits | None = None,
    clock: Callable[[], float] = time.time,
    batch: int = 100,
) -> Iterator[ImportOutcome | SourceError]:
    """Import each file, all or nothing per file, in order: its outcome, or
    the error that stopped it (the other files go on). Up to ``batch`` parsed
    files are written in one transaction, their run totals in one pass: a
    file that cannot be read or parsed is never part of a write."""
    limits = limits or ReadLimits()
    for start in range(0, len(paths), batch):
        done: list[ImportOutcome | SourceError | Parsed] = []
        for path in paths[start:start + batch]:
            try:
                done.append(parse_file(path, fmt, limits))
            except SourceError as exc:
                done.append(exc)
        now = clock()
        with store.write() as conn:
            existing = already_imported(conn, [item.sha256 for item in done if isinstance(item, Parsed)])
            runs: list[NewRun] = []
            seen: dict[str, ImportOutcome] = {}
            for i, item in enumerate(done):
                if not isinstance(item, Parsed):
                    continue
                if (item.sha256 in existing or item.sha256 in seen) and not again:
                    ids = tuple(existing.get(item.sha256, ())) or seen[item.sha256].run_ids
                    done[i] = ImportOutcome(path=item.path, sha256=item.sha256, run_ids=ids, skipped=True)
                    continue
                new = new_runs(item, now)
                runs += new
                done[i] = seen[item.sha256] = outcome(item, [r.run["id"] for r in new])
            write(conn, runs)
            totals_write.write(conn, [r.run["id"] for r in runs])
        for item in done:
            assert not isinstance(item, Parsed)
            yield item


def import_file(
    store: Store,
    path: Path,
    *,
    fmt: str = "auto",
    again: bool = False,
    limits: ReadLimits | None = None,
    clock: Callable[[], float] = time.time,
) -> ImportOutcome:
    """Import every trajectory of one file, all or nothing."""
    [result] = import_files(store, [path], fmt=fmt, again=again, limits=limits, clock=clock)
    if isinstance(result, SourceError):
        raise result
    return result
