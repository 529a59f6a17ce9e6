"""The store side of ``escrow import``: a source file's trajectories become
runs with ``mode = "import"``, written through the store's row builders and
hash chain, one transaction per file.

Each run's genesis (its ``config_json``) records the source file's sha256,
path, format and version, so its chain starts at the import. A call of the
source becomes a request row, a response row (envelope) and one attempt; its
tool results become candidates and tool executions with no ACL decision
(none was made). Figures the source lacks are stored as 0 with source
``absent``; ``sampling.extra.absent`` lists the request fields the source
does not give (max_tokens is then a placeholder 1, as the contract requires
one). Re-importing a file (same sha256) is a no-op unless ``again``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from orchestrator import __version__
from orchestrator.contract import Frozen, Message, ModelRequest, Sampling, ToolCall
from orchestrator.envelope import Attempt, Envelope, FigureSource, Payload, Status, Timings, Usage
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
from orchestrator.interop.records import IMPORT_MODE, SourceMessage
from orchestrator.source_figures import IMPORT_EVENT, RUN_LEVEL
from store import rows as build
from store import run_totals
from store.blobs import History
from store.blobs import put as put_blobs
from store.recorder import VERDICT_EVENT
from store.rows import Pending
from store.store import Store
from store.tables import Run, table_of
from store.writer import append

RUNS = table_of(Run)

IMPORTED_VERDICT = "IMPORTED"
REASONING_EVENT = "source_reasoning"
ABSENT_REQUEST_FIELDS = ("max_tokens", "temperature", "top_p", "stop", "tools")
TRUNCATED = {"length", "max_tokens", "model_length"}
REFUSED = {"content_filter", "refusal"}


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


def already_imported(conn: Connection, sha256: str) -> list[str]:
    needle = f'%"sha256":"{sha256}"%'
    stmt = (
        select(RUNS.c.id).where(RUNS.c.mode == IMPORT_MODE, RUNS.c.config_json.like(needle)).order_by(RUNS.c.created_at)
    )
    return [str(r) for r in conn.execute(stmt).scalars()]


def status_of(finish_reason: str | None) -> Status:
    reason = (finish_reason or "").lower()
    if reason in TRUNCATED:
        return Status.TRUNCATED
    if reason in REFUSED:
        return Status.REFUSED
    return Status.COMPLETED


def figure(value: int | None) -> tuple[int, FigureSource]:
    return (0, "absent") if value is None else (value, "server")


def envelope_of(item: SourceMessage) -> Envelope:
    call, message = item.call, item.message
    assert call is not None
    prompt, prompt_source = figure(call.usage.prompt_tokens)
    cached, cached_source = figure(call.usage.cached_tokens)
    completion, completion_source = figure(call.usage.completion_tokens)
    status = status_of(call.finish_reason)
    total_s = call.duration_s or 0.0
    return Envelope(
        status=status,
        payload=Payload(text=message.content or "", tool_calls=message.tool_calls),
        finish_reason=call.finish_reason,
        usage=Usage(
            prompt_tokens=prompt,
            cached_prompt_tokens=cached,
            completion_tokens=completion,
            prompt_source=prompt_source,
            cached_source=cached_source,
            completion_source=completion_source,
        ),
        timings=Timings(total_s=total_s),
        model=call.model,
        logprobs=call.logprobs,
        attempts=(Attempt(number=1, status=status, duration_s=total_s),),
    )


def request_of(model: str, history: Sequence[Message]) -> ModelRequest:
    messages = tuple(history) or (Message(role="user", content=""),)
    return ModelRequest(
        model=model,
        messages=messages,
        max_tokens=1,
        sampling=Sampling(temperature=None, extra={"imported": True, "absent": list(ABSENT_REQUEST_FIELDS)}),
    )


class RunBuilder:
    """The rows of one imported trajectory, in chain order."""

    def __init__(self, run_id: str, trajectory: SourceTrajectory, now: float) -> None:
        self.run_id, self.trajectory, self.now = run_id, trajectory, now
        self.rows: list[Pending] = []
        self.blobs: dict[str, str] = {}  # the requests' messages and tools, stored once (store.blobs)
        self.history: History | None = None
        self.turn = 0
        self.turn_start = 0
        self.turn_messages: list[Message] = []
        self.call_id: str | None = None
        self.open_calls: dict[str, ToolCall] = {}
        self.tool_ids: list[str] = []
        self.next_index = 0

    def close_turn(self) -> None:
        if self.call_id is None:
            return
        n = len(self.rows) - self.turn_start
        self.rows.append(build.turn_row(self.run_id, self.turn, n, self.turn_messages, self.now))
        self.turn_messages, self.call_id = [], None

    def add_call(self, item: SourceMessage, history: Sequence[Message]) -> None:
        self.close_turn()
        self.turn += 1
        self.turn_start = len(self.rows)
        call = item.call
        assert call is not None
        # The model asked for (the source's configured one) groups reports; the one that answered is the envelope's.
        model = self.trajectory.model or call.model or "unknown"
        self.call_id = build.new_row_id()
        stored = build.request_row(
            self.call_id, self.run_id, self.turn, request_of(model, history), None, call.at or self.now, self.history
        )
        self.rows.append(stored.row)
        self.blobs.update(stored.blobs)
        self.history = stored.history
        answered_at = call.at + (call.duration_s or 0.0) if call.at is not None else self.now
        self.rows += build.response_rows(
            self.call_id, self.run_id, self.turn, envelope_of(item), call.usage.cost_usd, answered_at
        )
        if call.reasoning:
            self.rows.append(
                build.event_row(self.run_id, self.turn, REASONING_EVENT, {"text": call.reasoning}, self.now)
            )
        self.open_calls = {c.id: c for c in item.message.tool_calls}
        self.tool_ids = [c.id for c in item.message.tool_calls]
        self.next_index = len(self.tool_ids)
        self.turn_messages.append(item.message)

    def add_observation(self, item: SourceMessage) -> None:
        obs = item.observation
        assert obs is not None and self.call_id is not None
        proposed = self.open_calls.pop(obs.tool_call_id, None) if obs.tool_call_id else None
        if proposed is not None:
            index = self.tool_ids.index(proposed.id)
            tool_call: Any = proposed
            arguments: Any = proposed.arguments
        else:
            # A text action (or a result naming no call of this message): a candidate after the tool calls.
            index, self.next_index = self.next_index, self.next_index + 1
            tool_call = {"name": obs.tool_name, "text_action": obs.action}
            arguments = None if obs.action is None else {"action": obs.action}
        candidate_id = build.new_row_id()
        self.rows.append(
            build.candidate_row(
                candidate_id, self.run_id, self.turn, self.call_id, index, tool_call, obs.at or self.now
            )
        )
        detail = {"imported": True, **({"error": obs.error} if obs.error else {})}
        self.rows.append(
            build.tool_execution_row(
                self.run_id,
                self.turn,
                candidate_id,
                tool=obs.tool_name,
                arguments_json=arguments,
                decision=None,
                rule=None,
                reason=None,
                exit_code=obs.exit_code,
                stdout=None,
                stderr=None,
                duration_s=obs.duration_s,
                observation=item.message.content or "",
                cap=0,
                now=obs.at or self.now,
                ok=None if obs.exit_code is None else obs.exit_code == 0,
                detail=detail,
            )
        )
        self.turn_messages.append(item.message)


def trajectory_rows(
    run_id: str, trajectory: SourceTrajectory, meta: dict[str, Any], now: float, ended: float | None = None
) -> tuple[list[Pending], dict[str, str]]:
    """Pure: every chained row of one imported trajectory, and the blobs its
    requests refer to. ``now``: the run's start (rows the source gives no
    time for); ``ended``: its end, the verdict's time (the run's finished_at)."""
    builder = RunBuilder(run_id, trajectory, now)
    builder.rows.append(build.event_row(run_id, None, IMPORT_EVENT, {**meta, **run_level(trajectory),
                                                                    "info": trajectory.info}, now))
    histories: dict[int, list[Message]] = {}
    for item in trajectory.messages:
        history = histories.setdefault(item.conversation, [])
        if item.call is not None:
            builder.add_call(item, history)
        elif item.observation is not None and builder.call_id is not None:
            builder.add_observation(item)
        elif builder.call_id is not None:
            builder.turn_messages.append(item.message)
        history.append(item.message)
    builder.close_turn()
    builder.rows.append(
        build.event_row(
            run_id, None, VERDICT_EVENT, {"verdict": IMPORTED_VERDICT, "detail": outcome_of(trajectory)},
            max(now, ended or now),
        )
    )
    return builder.rows, builder.blobs


def run_level(trajectory: SourceTrajectory) -> dict[str, Any]:
    """The source's run-level totals as the import event records them:
    ``reported`` (all of them) and ``counted`` (those no call gives, which
    count in the run's totals and in aggregates, marked run-level)."""
    counted = trajectory.run_level_counted()
    return {RUN_LEVEL: {
        "reported": None if trajectory.run_usage is None else trajectory.run_usage.model_dump(),
        "counted": None if counted is None else counted.model_dump(),
    }}


def outcome_of(trajectory: SourceTrajectory) -> str:
    """The source's own outcome, as the verdict detail (Escrow verified nothing)."""
    info = trajectory.info
    parts = [f"{trajectory.format} {trajectory.version}"]
    if info.get("exit_status"):
        parts.append(f"exit status {info['exit_status']}")
    if isinstance(info.get("scores"), dict):
        parts.append(
            "scores "
            + ", ".join(f"{k}={v.get('value') if isinstance(v, dict) else v}" for k, v in info["scores"].items())
        )
    return "; ".join(parts)


def first_time(trajectory: SourceTrajectory) -> float | None:
    times = message_times(trajectory)
    return min(times) if times else None


def last_time(trajectory: SourceTrajectory) -> float | None:
    times = message_times(trajectory)
    return max(times) if times else None


def message_times(trajectory: SourceTrajectory) -> list[float]:
    """The times the source gives its calls and tool results."""
    out = []
    for m in trajectory.messages:
        if m.call is not None and m.call.at is not None:
            out.append(m.call.at + (m.call.duration_s or 0.0))
        if m.observation is not None and m.observation.at is not None:
            out.append(m.observation.at)
    return out


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


def write_runs(conn: Connection, parsed: Parsed, now: float) -> list[str]:
    """The runs of one parsed file, in the caller's transaction (their totals are the caller's)."""
    run_ids = []
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
        model = (
            trajectory.model
            or next((m.call.model for m in trajectory.messages if m.call and m.call.model), None)
            or "unknown"
        )
        started = trajectory.started_at or first_time(trajectory) or now
        row = build.run_row(
            run_id=run_id, now=started, task=trajectory.task, repo=parsed.path, config={"import": meta}, policy={},
            model=model, mode=IMPORT_MODE, parent_run_id=None, forked_at_turn=None, version=__version__,
        )
        conn.execute(RUNS.insert(), [row])
        ended = trajectory.ended_at or last_time(trajectory) or started
        rows, blobs = trajectory_rows(run_id, trajectory, meta, started, ended)
        put_blobs(conn, blobs)
        verdict = append(conn, run_id, rows)[-1]
        conn.execute(
            RUNS.update().where(RUNS.c.id == run_id).values(
                status="finished", verdict=IMPORTED_VERDICT,
                verdict_detail=json.loads(verdict["data_json"])["detail"], finished_at=verdict["at"],
            )
        )
        run_ids.append(run_id)
    return run_ids


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
            written: list[str] = []
            seen: dict[str, ImportOutcome] = {}
            for i, item in enumerate(done):
                if not isinstance(item, Parsed):
                    continue
                existing = already_imported(conn, item.sha256)
                if (existing or item.sha256 in seen) and not again:
                    ids = tuple(existing) or seen[item.sha256].run_ids
                    done[i] = ImportOutcome(path=item.path, sha256=item.sha256, run_ids=ids, skipped=True)
                    continue
                run_ids = write_runs(conn, item, now)
                written += run_ids
                done[i] = seen[item.sha256] = outcome(item, run_ids)
            run_totals.write(conn, written)
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
