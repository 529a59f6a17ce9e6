"""``escrow export --format rollout``: a recorded run as training sequences
(``orchestrator.rollout``), read from the store's expanded envelopes, as
JSON lines or Parquet."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.rollout import Provenance, RolloutCall, row, sequences
from orchestrator.trajectory import Trajectory


def rollout_rows(trajectory: Trajectory, shape: str = "flat",
                 teacher: dict[str, dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """The run's rows; ``RolloutRefused`` (with the reason) for a run without
    exact ids. ``teacher``: per call id, a teacher's score row
    (``store.write.teacher_scores.scores``: its logprobs, top K and K)."""
    calls = sorted((c for record in trajectory.turns for c in record.calls if c.response is not None),
                   key=lambda c: c.seq)
    scored = {} if teacher is None else teacher
    rollout = [RolloutCall(call_id=c.id, turn=c.turn, envelope=c.response.envelope(),
                           teacher_logprobs=None if c.id not in scored else tuple(scored[c.id]["logprobs"]),
                           teacher_top=_top(scored[c.id]["top"]) if c.id in scored else None,
                           teacher_top_k=scored[c.id]["top_k"] if c.id in scored else None)
               for c in calls if c.response is not None]
    found = sequences(rollout)
    last = calls[-1]
    envelope = rollout[-1].envelope
    sampling = {"temperature": last.temperature, "top_p": last.top_p, "top_k": last.top_k, "seed": last.seed,
                "max_tokens": last.max_tokens}
    provenance = Provenance(run_id=trajectory.run.id, verdict=trajectory.run.verdict,
                            model=envelope.model or last.request_model, engine=envelope.engine, sampling=sampling)
    for sequence in found:
        yield row(provenance, sequence, len(found), shape)


def _top(stored: list[list[list[Any]]] | None) -> tuple[tuple[tuple[int, float | None], ...], ...] | None:
    """A score row's top K as stored ([[id, logprob], ...] a sampled id), as tuples."""
    return None if stored is None else tuple(tuple((pair[0], pair[1]) for pair in best) for best in stored)


def write_parquet(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Rows as one Parquet table (pyarrow, the ``batch`` extra); returns how many."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError("Parquet needs pyarrow: pip install 'escrow[batch]' (or write .jsonl)") from None
    listed = list(rows)
    try:
        pq.write_table(pa.Table.from_pylist(listed), path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc}", path=str(path)) from None
    return len(listed)
