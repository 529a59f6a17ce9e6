"""The write side: what the loop calls to record a run.

Write-ahead: a request row is committed before the call is made, and the
envelope (with its attempts) right after it. The turn's remaining rows
(candidates, transitions, tool executions, events) are buffered by a
``TurnWriter`` and committed together with the turn's own row in one
transaction, so a crash loses at most the turn in flight and never leaves
half a turn's actions. Every row extends the run's hash chain, and every
write after a run's first goes through ``Recorder.commit_runs`` (a turn's,
an event's, a verdict's and teacher scores, the last for several runs in one
transaction).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, select

from orchestrator import __version__
from orchestrator.contract import Message, ModelRequest
from orchestrator.envelope import Envelope
from store.chain import GENESIS_EVENT, VERDICT_EVENT
from store.errors import RecordingError
from store.read.liveness import LeaseClaim, claim_run
from store.schema.tables import ModelCall, Run, table_of
from store.transactions import Writable
from store.write import rows as build
from store.write import token_ids
from store.write.blobs import History
from store.write.blobs import put as put_blobs
from store.write.rows import Output, Pending
from store.write.writer import append

DEFAULT_OUTPUT_CAP = 64 * 1024


class RunRows(NamedTuple):
    """One run's part of a commit: ``rows`` appended to its chain, its
    ``run_update`` and the request ``blobs`` they use; ``history`` and
    ``prompt_ids`` are what the run's next request and envelope store their
    additions against, kept once the commit is in (None keeps the last)."""

    run_id: str
    rows: Sequence[Pending]
    run_update: Mapping[str, Any] | None = None
    blobs: Mapping[str, str] | None = None
    history: History | None = None
    prompt_ids: tuple[int, ...] | None = None


class Recorder:
    """Records runs into a writable Store. ``clock`` gives Unix seconds;
    ``output_cap_bytes`` caps stored stdout/stderr (sizes and sha256 are of
    the full output)."""

    def __init__(
        self, store: Writable, *, clock: Callable[[], float] = time.time, output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    ) -> None:
        self.store = store
        self.clock = clock
        self.output_cap_bytes = output_cap_bytes
        # Each run's last message list, so the next request stores only what it adds.
        self._histories: dict[str, History] = {}
        # Each run's last recorded prompt ids, so the next envelope stores only what its prompt adds.
        self._prompt_ids: dict[str, tuple[int, ...]] = {}

    def stored_envelope(self, run_id: str, envelope: Envelope) -> Envelope:
        return token_ids.compact(envelope, self._prompt_ids.get(run_id))

    def start_run(
        self, *, task: str, repo: str, config: Mapping[str, Any], policy: Mapping[str, Any], model: str,
        mode: str = "run", parent_run_id: str | None = None, forked_at_turn: int | None = None,
        lease: LeaseClaim | None = None,
    ) -> str:
        """Record a new run; with ``lease``, the run's lease is taken in the
        same transaction (``store.read.liveness.claim_run``)."""
        run_id = build.new_run_id()
        row = build.run_row(
            run_id=run_id, now=self.clock(), task=task, repo=repo, config=config, policy=policy, model=model,
            mode=mode, parent_run_id=parent_run_id, forked_at_turn=forked_at_turn, version=__version__,
        )
        # The genesis columns again as the first chained row: verify can then
        # name the run row's column that was altered instead of blaming seq 1.
        copy = build.event_row(run_id, None, GENESIS_EVENT, build.genesis_values(row), row["created_at"])
        with self.store.write() as conn:
            conn.execute(table_of(Run).insert(), [row])
            append(conn, run_id, [copy])
            if lease is not None:
                claim_run(conn, run_id, lease)
        return run_id

    def turn(self, run_id: str, turn: int) -> "TurnWriter":
        return TurnWriter(self, run_id, turn)

    def record_event(self, run_id: str, turn: int | None, kind: str, data: Mapping[str, Any]) -> str:
        """An event outside any open turn (a run's patch, its engine), committed at once."""
        pending = self.event_row(run_id, turn, kind, data)
        self.commit(run_id, [pending])
        return str(pending[1]["id"])

    def finish_run(self, run_id: str, verdict: str, detail: str = "", *, turn: int | None = None,
                   extra: dict[str, Any] | None = None) -> None:
        """Record the verdict event (with ``extra``, e.g. the verified patch's
        sha256) and close the run, in one transaction."""
        now = self.clock()
        self._histories.pop(run_id, None)
        pending = build.event_row(run_id, turn, VERDICT_EVENT, {**(extra or {}), "verdict": verdict, "detail": detail},
                                  now)
        self.commit(
            run_id, [pending],
            run_update={"status": "finished", "verdict": verdict, "verdict_detail": detail, "finished_at": now},
        )

    def tool_row(self, run_id: str, turn: int | None, candidate_id: str, **fields: Any) -> Pending:
        return build.tool_execution_row(
            run_id, turn, candidate_id, cap=self.output_cap_bytes, now=self.clock(), **fields
        )

    def event_row(self, run_id: str, turn: int | None, kind: str, data: Mapping[str, Any]) -> Pending:
        if kind == VERDICT_EVENT:
            raise RecordingError("a verdict is recorded with finish_run, which also closes the run", run_id=run_id)
        if kind == GENESIS_EVENT:
            raise RecordingError("the genesis event is recorded by start_run only", run_id=run_id)
        return build.event_row(run_id, turn, kind, data, self.clock())

    def commit(
        self, run_id: str, rows: Sequence[Pending], *, run_update: Mapping[str, Any] | None = None,
        blobs: Mapping[str, str] | None = None, history: History | None = None,
        prompt_ids: tuple[int, ...] | None = None,
    ) -> list[dict[str, Any]]:
        """``commit_runs`` for one run (a turn's rows, an event, a verdict)."""
        (written,) = self.commit_runs(
            [RunRows(run_id, rows, run_update=run_update, blobs=blobs, history=history, prompt_ids=prompt_ids)]
        )
        return written

    def commit_runs(self, runs: Sequence[RunRows]) -> list[list[dict[str, Any]]]:
        """The one write: each run's rows appended to its chain, all in one
        transaction. A row naming a call must name one its own run made in its
        own turn, else RecordingError and nothing is written. Returns each
        run's rows as written."""
        with self.store.write() as conn:
            written = []
            for run in runs:
                _check_calls(conn, run.run_id, run.rows)
                put_blobs(conn, run.blobs or {})
                written.append(append(conn, run.run_id, run.rows, run.run_update))
        # Only once committed: a later request or envelope stores what it adds
        # to these, so they must never name nodes or ids the store lacks.
        for run in runs:
            if run.history is not None:
                self._histories[run.run_id] = run.history
            if run.prompt_ids is not None:
                self._prompt_ids[run.run_id] = run.prompt_ids
        return written

    def history(self, run_id: str) -> History | None:
        """The run's last committed message list (None before its first request)."""
        return self._histories.get(run_id)


class TurnWriter:
    """Buffers one turn. ``request`` commits at once (with anything buffered
    before it); everything else waits for ``commit``, which writes it all and
    the turn row in one transaction. Leaving a ``with`` block on an exception
    discards the buffer, as a crash would."""

    def __init__(self, recorder: Recorder, run_id: str, turn: int) -> None:
        self.recorder = recorder
        self.run_id = run_id
        self.turn = turn
        self.pending: list[Pending] = []
        self.call_ids: set[str] = set()
        self.states: dict[str, str | None] = {}
        self.early_rows = 0  # post-call rows committed before the turn row (the envelope's)
        self.closed = False

    def __enter__(self) -> "TurnWriter":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None and not self.closed:
            self.commit()

    def request(self, request: ModelRequest, attempt_of: str | None = None) -> str:
        call_id = build.new_row_id()
        stored = build.request_row(
            call_id, self.run_id, self.turn, request, attempt_of, self.recorder.clock(),
            self.recorder.history(self.run_id),
        )
        self.recorder.commit(self.run_id, [*self.pending, stored.row], blobs=stored.blobs, history=stored.history)
        self.pending.clear()
        self.call_ids.add(call_id)
        return call_id

    def envelope(self, call_id: str, envelope: Envelope, cost_usd: float | None = None) -> None:
        """Committed at once, like the request: a model output is the costliest
        row of a turn, and a crash during the turn's tool calls must not lose it."""
        if call_id not in self.call_ids:
            raise RecordingError(
                f"turn {self.turn} of run {self.run_id} did not make call {call_id}", call_id=call_id
            )
        stored = self.recorder.stored_envelope(self.run_id, envelope)
        rows = build.response_rows(call_id, self.run_id, self.turn, stored, cost_usd, self.recorder.clock())
        self.recorder.commit(self.run_id, [*self.pending, *rows], prompt_ids=envelope.prompt_token_ids)
        self.early_rows += len(self.pending) + len(rows)
        self.pending.clear()

    def candidate(self, call_id: str, candidate_index: int, tool_call: Any) -> str:
        candidate_id = build.new_row_id()
        self.pending.append(
            build.candidate_row(
                candidate_id, self.run_id, self.turn, call_id, candidate_index, tool_call, self.recorder.clock()
            )
        )
        self.states[candidate_id] = None
        return candidate_id

    def transition(
        self, candidate_id: str, from_state: str | None, to_state: str, reason: str = "", layer: str | None = None
    ) -> None:
        if candidate_id not in self.states:
            raise RecordingError(
                f"candidate {candidate_id} was not staged in turn {self.turn}", candidate_id=candidate_id
            )
        check_transition(candidate_id, self.states[candidate_id], from_state, to_state)
        self.states[candidate_id] = _state(to_state)
        self.pending.append(
            build.transition_row(
                self.run_id,
                self.turn,
                candidate_id,
                _state(from_state),
                _state_name(to_state),
                reason,
                layer,
                self.recorder.clock(),
            )
        )

    def tool_execution(
        self, candidate_id: str, *, tool: str, arguments_json: Any, decision: str | None, rule: str | None,
        reason: str | None, exit_code: int | None, stdout: Output, stderr: Output, duration_s: float | None,
        observation: str, ok: bool | None = None, detail: Mapping[str, Any] | None = None,
    ) -> str:
        """The ACL decision on a candidate of this turn and, when it ran, its
        outcome. ``observation`` is stored byte-exact; stdout/stderr capped."""
        if candidate_id not in self.states:
            raise RecordingError(
                f"candidate {candidate_id} was not staged in turn {self.turn}", candidate_id=candidate_id
            )
        pending = self.recorder.tool_row(
            self.run_id,
            self.turn,
            candidate_id,
            tool=tool,
            arguments_json=arguments_json,
            decision=decision,
            rule=rule,
            reason=reason,
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            duration_s=duration_s,
            observation=observation,
            ok=ok,
            detail=detail,
        )
        self.pending.append(pending)
        return str(pending[1]["id"])

    def event(self, kind: str, data: Mapping[str, Any]) -> str:
        pending = self.recorder.event_row(self.run_id, self.turn, kind, data)
        self.pending.append(pending)
        return str(pending[1]["id"])

    def commit(self, messages: Sequence[Message] = ()) -> None:
        """Write the buffered rows and the turn row; ``messages`` are those the
        turn appended to the history."""
        if self.closed:
            raise RecordingError(f"turn {self.turn} of run {self.run_id} was already committed")
        turn_row = build.turn_row(
            self.run_id, self.turn, self.early_rows + len(self.pending), messages, self.recorder.clock()
        )
        self.recorder.commit(self.run_id, [*self.pending, turn_row])
        self.pending.clear()
        self.closed = True


def _state(value: Any) -> str | None:
    return None if value is None else _state_name(value)


def _state_name(value: Any) -> str:
    """A state (an enum member or its value) as stored."""
    return str(getattr(value, "value", value))


def check_transition(candidate_id: str, current: str | None, from_state: Any, to_state: Any) -> None:
    """The recorded history of a candidate must be continuous."""
    if _state(from_state) != current:
        raise RecordingError(
            f"candidate {candidate_id} is {current or 'unstaged'}, not {_state(from_state) or 'unstaged'}",
            candidate_id=candidate_id,
        )
    if _state(to_state) is None:
        raise RecordingError("a transition needs a target state", candidate_id=candidate_id)


def _check_calls(conn: Connection, run_id: str, rows: Sequence[Pending]) -> None:
    """Rows naming a call (responses, attempts, candidates, teacher scores)
    must name one that their run made in their turn: made before, or among
    these rows."""
    named = {(row["call_id"], row.get("turn")) for _, row in rows if "call_id" in row}
    if not named:
        return
    t = table_of(ModelCall)
    made = {(row["id"], row.get("turn")) for table, row in rows if table is t}
    wanted = {call_id for call_id, _ in named} - {call_id for call_id, _ in made}
    if wanted:
        made |= {(call_id, turn) for call_id, turn in conn.execute(
            select(t.c.id, t.c.turn).where(t.c.id.in_(wanted), t.c.run_id == run_id))}
    wrong = sorted(f"{call_id} (turn {turn})" for call_id, turn in named - made)
    if wrong:
        raise RecordingError(f"run {run_id} did not make these calls in these turns: {', '.join(wrong)}",
                             run_id=run_id)
