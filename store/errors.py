"""Typed store errors. Each carries the store location and an exit code the
CLI uses, so a bad file ends in one clear line, never a traceback."""

from __future__ import annotations

from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode


class StoreError(EscrowError):
    """Base of every store failure."""

    exit_code = ExitCode.STORE_MISSING


class StoreNotFound(StoreError):
    """The store file does not exist and was not to be created."""

    exit_code = ExitCode.STORE_MISSING


class NotAStore(StoreError):
    """The file is not SQLite, is truncated or corrupt, or holds a foreign schema."""

    exit_code = ExitCode.STORE_DAMAGED


class SchemaTooNew(StoreError):
    """The store was written by a newer Escrow; this one will not touch it."""

    exit_code = ExitCode.SCHEMA_MISMATCH


class SchemaTooOld(StoreError):
    """A read-only open found a store that needs migrating first."""

    exit_code = ExitCode.SCHEMA_MISMATCH


class RunNotFound(StoreError):
    """No run matches the given id or prefix, or the prefix is ambiguous."""

    exit_code = ExitCode.RUN_NOT_FOUND


class RecordingError(StoreError):
    """A write that would make the record inconsistent (unknown call, illegal
    transition, a turn recorded twice)."""

    exit_code = ExitCode.RECORDING_INCONSISTENT


class ChainBroken(StoreError):
    """``verify`` found a broken link in a run's hash chain."""

    exit_code = ExitCode.FINDING


class StoreDamaged(NotAStore):
    """A page or a cell of the store is damaged: SQLite reports corruption, or
    a cell holds a value its column cannot (a BLOB in a text column, text in
    a REAL one). Same exit code as any other unreadable store."""


class TtftRollupMismatch(StoreDamaged):
    """The TTFT rollups (``ttft_days``, ``run_ttfts``) a report summed for a
    group do not add up to the TTFT checks of its runs' digested totals:
    altered, or left behind. The report names the groups and stops."""

    def __init__(self, by: str, groups: list[str]) -> None:
        self.groups = groups
        shown = ", ".join(groups[:10]) + (f" and {len(groups) - 10} more" if len(groups) > 10 else "")
        super().__init__(
            f"damaged store: the stored TTFT histograms (ttft_days, run_ttfts) of {len(groups)} group(s) by {by} "
            f"do not match their runs' totals: {shown}; `escrow verify` recomputes them from the runs' rows",
            table="ttft_days")


class UncheckedRows(StoreDamaged):
    """Runs an aggregate report reads from their rows (no totals: still
    running, crashed, or with a damaged cell) whose chain does not verify:
    their rows were altered. The report names the runs and stops rather
    than sum figures nothing vouches for."""

    def __init__(self, run_ids: list[str], detail: str) -> None:
        self.run_ids = run_ids
        shown = ", ".join(run_ids[:10]) + (f" and {len(run_ids) - 10} more" if len(run_ids) > 10 else "")
        super().__init__(
            f"damaged store: {len(run_ids)} run(s) without totals (running, crashed, or with a damaged cell), "
            f"whose rows a report sums, do not verify ({detail}): {shown}; `escrow verify RUN` names the row",
            run_ids=run_ids)


class BatchAttributionMismatch(StoreDamaged):
    """Runs the batch tables attribute to a batch and task other than the
    ones their own chained record (the config in their genesis) names: the
    batch tables, outside the chain, were edited. A report by batch names
    the runs and stops."""

    def __init__(self, run_ids: list[str], detail: str) -> None:
        self.run_ids = run_ids
        shown = ", ".join(run_ids[:10]) + (f" and {len(run_ids) - 10} more" if len(run_ids) > 10 else "")
        super().__init__(
            f"damaged store: the batch attempts (batch_attempts) of {len(run_ids)} run(s) disagree with the batch "
            f"and task their runs recorded ({detail}): {shown}", table="batch_attempts", run_ids=run_ids)


class RollupMismatch(StoreDamaged):
    """Stored per-run totals that do not match their digest: altered in place,
    or computed before the run's chain moved on (stale). A report names the
    runs and stops rather than print figures it cannot vouch for."""

    def __init__(self, run_ids: list[str], detail: str | None = None) -> None:
        self.run_ids = run_ids
        shown = ", ".join(run_ids[:10]) + (f" and {len(run_ids) - 10} more" if len(run_ids) > 10 else "")
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"damaged store: the stored totals (run_totals) of {len(run_ids)} run(s) are stale or altered{why}: "
            f"{shown}; `escrow verify RUN` compares the totals and the chain with the run's rows",
            table="run_totals", run_ids=run_ids)
