"""Live counts of a running batch and its ETA, fed by each attempt's end."""

from __future__ import annotations

import threading
import time

from orchestrator.composition.batch.report import PASS, SUSPECT, start_timed_out
from orchestrator.composition.batch.runner import AttemptResult
from orchestrator.costing.money import dollars
from store.write.batches import INFRASTRUCTURE, INTERRUPTED, MODEL


class BatchProgress:
    def __init__(self, total: int, *, clock=time.monotonic) -> None:
        self.total, self.clock = total, clock
        self.started = clock()
        self.passed = self.suspect = self.failed = self.infra = self.start_timeouts = self.task_errors = 0
        self.cost_usd = 0.0
        self.lock = threading.Lock()

    def attempt(self, result: AttemptResult) -> None:
        with self.lock:
            if result.outcome == MODEL:
                # SUSPECT is its own count: its verifier passed, but it is never a pass.
                self.passed += result.verdict == PASS
                self.suspect += result.verdict == SUSPECT
                self.failed += result.verdict not in (PASS, SUSPECT)
                self.cost_usd += result.cost_usd
            elif result.outcome == INFRASTRUCTURE:
                self.infra += 1
                self.start_timeouts += start_timed_out(result.error)
            elif result.outcome != INTERRUPTED:  # a canceled run is not finished: --resume reruns it
                self.task_errors += 1

    @property
    def finished(self) -> int:
        return self.passed + self.suspect + self.failed + self.task_errors

    def eta_s(self) -> float | None:
        elapsed = self.clock() - self.started
        if self.finished == 0:
            return None
        return elapsed / self.finished * (self.total - self.finished)

    def line(self, running: int) -> str:
        """One status line, under 80 columns in the common case: the counts
        that are zero and say nothing (no infrastructure failure) are left out."""
        eta = self.eta_s()
        parts = [f"{self.finished}/{self.total} done", f"running {running}", f"passed {self.passed}",
                 *([f"suspect {self.suspect}"] if self.suspect else []), f"failed {self.failed}"]
        if self.task_errors:  # a task that could not run (a missing context window): not "failed 0"
            parts.append(f"task errors {self.task_errors}")
        if self.infra:
            parts.append(f"infra errors {self.infra} (start timeouts {self.start_timeouts})")
        parts.append(dollars(self.cost_usd))
        if eta is not None:
            parts.append(f"ETA {eta:.0f}s")
        return " · ".join(parts)
