"""The verdict from evidence: what the trusted pytest reporter
(``sandbox/evidence_plugin.py``, baked into the sandbox image) wrote on its
channel, read back by the host under caps, and the rule that turns it, the
verify command's exit code and the required tests into PASS or FAIL.

PASS needs the exit code 0, one pytest session that started and ended
through the reporter, and every required test seen passing on the channel.
A verify command that is not pytest keeps the exit-code verdict and says so.
The code under test runs in the reporter's process, so a determined forgery
of the reporter itself stays possible (docs/SANDBOX.md, "Evidence").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Literal

from orchestrator.contract import Frozen

# Caps on what the host reads of the channel: a hostile test run may write to it.
MAX_CHANNEL_BYTES = 4 << 20
MAX_LINE_BYTES = 8192
MAX_RECORDS = 100_000
MAX_ID_CHARS = 2000
MAX_MESSAGE_CHARS = 300
MAX_SHOWN_IDS = 20
MAX_SHOWN_REASONS = 12

# The reporter's environment: the module's name (importable from the image's
# own site-packages, ahead of nothing the workspace can add: verifier_view
# leaves out a module of that name), the channel's path, and the mode.
PLUGIN_MODULE = "escrow_evidence"
CHANNEL_ENV = "ESCROW_EVIDENCE"
MODE_ENV = "ESCROW_EVIDENCE_MODE"
COLLECT_ADDOPTS = "--collect-only -q --continue-on-collection-errors"

Outcome = Literal["passed", "failed", "skipped"]
_PYTEST_WORD = re.compile(r"(?:^|[/=])(?:pytest|py\.test)(?:-?3(?:\.\d+)?)?$")


def is_pytest_command(command: str) -> bool:
    """Whether a verify command runs pytest (``pytest``, ``python3 -m pytest``,
    ``py.test``, ``/usr/bin/pytest-3``): only then is evidence asked for."""
    words = re.split(r"[\s;&|()<>`'\"]+", command)  # also inside ``bash -c "..."``
    return any(_PYTEST_WORD.search(w) for w in words)


def reporter_env(channel: str, mode: Literal["run", "collect"]) -> dict[str, str]:
    """What the host adds to the verify command's environment: pytest loads
    ``PLUGIN_MODULE`` from ``PYTEST_PLUGINS`` before any conftest or test module."""
    env = {"PYTEST_PLUGINS": PLUGIN_MODULE, CHANNEL_ENV: channel, MODE_ENV: mode}
    if mode == "collect":
        env["PYTEST_ADDOPTS"] = COLLECT_ADDOPTS
    return env


class TestRecord(Frozen):
    __test__ = False  # not a pytest class

    id: str
    outcome: Outcome
    message: str = ""


class Channel(Frozen):
    """The channel as read: sessions started and ended, each test's last
    outcome, what was collected or deselected, and every line that breaks the
    reporter's own format (``problems``: someone else wrote there)."""

    starts: int = 0
    ends: int = 0
    end_status: int | None = None
    tests: dict[str, TestRecord] = {}
    collected: tuple[str, ...] = ()
    collect_errors: tuple[str, ...] = ()
    deselected: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    truncated: bool = False


def _string(value: object, cap: int) -> str | None:
    return value[:cap] if isinstance(value, str) and value else None


def parse_channel(data: bytes, *, truncated: bool = False) -> Channel:
    """The reporter's JSON lines, read under caps. Every record carries the
    writing process's pid and a sequence number from 0 at its start record;
    a line out of that order, malformed, over a cap or of an unknown kind is
    a problem, named with its line number."""
    problems: list[str] = []
    tests: dict[str, TestRecord] = {}
    collected: list[str] = []
    errors: list[str] = []
    deselected: list[str] = []
    starts = ends = 0
    end_status: int | None = None
    next_seq: dict[int, int] = {}
    if len(data) > MAX_CHANNEL_BYTES:
        data, truncated = data[:MAX_CHANNEL_BYTES], True
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        problems.append(f"line {len(lines)}: not ended by a newline")
    if len(lines) > MAX_RECORDS:
        lines, truncated = lines[:MAX_RECORDS], True
    for number, raw in enumerate(lines, 1):
        record = _record(raw)
        if record is None:
            problems.append(f"line {number}: not a record of the reporter")
            continue
        kind, pid, seq = record.get("kind"), record.get("pid"), record.get("seq")
        if not isinstance(pid, int) or not isinstance(seq, int) or isinstance(pid, bool) or isinstance(seq, bool):
            problems.append(f"line {number}: no pid and sequence number")
            continue
        if kind == "start":
            if seq != 0:
                problems.append(f"line {number}: a start record out of sequence")
            starts += 1
            next_seq[pid] = 1
            continue
        if next_seq.get(pid) != seq:
            problems.append(f"line {number}: out of sequence for process {pid}")
            continue
        next_seq[pid] = seq + 1
        ident = _string(record.get("id"), MAX_ID_CHARS)
        if kind == "end":
            status = record.get("exitstatus")
            ends += 1
            end_status = status if isinstance(status, int) and not isinstance(status, bool) else None
        elif kind == "test" and ident is not None and (outcome := _outcome(record.get("outcome"))):
            message = _string(record.get("message"), MAX_MESSAGE_CHARS) or ""
            tests[ident] = TestRecord(id=ident, outcome=outcome, message=message)
        elif kind == "collected" and ident is not None:
            collected.append(ident)
        elif kind == "collect_error" and ident is not None:
            errors.append(ident)
        elif kind == "deselected" and ident is not None:
            deselected.append(ident)
        else:
            problems.append(f"line {number}: an unknown or incomplete {str(kind)[:20]!r} record")
    return Channel(starts=starts, ends=ends, end_status=end_status, tests=tests, collected=tuple(collected),
                   collect_errors=tuple(errors), deselected=tuple(deselected), problems=tuple(problems),
                   truncated=truncated)


def _outcome(value: object) -> Outcome | None:
    if value == "passed":
        return "passed"
    if value == "failed":
        return "failed"
    return "skipped" if value == "skipped" else None


def _record(raw: bytes) -> dict[str, object] | None:
    if len(raw) > MAX_LINE_BYTES:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class Required(Frozen):
    """The tests a PASS needs, and where the list came from: the task's named
    tests, or a trusted pre-pass over the starting copy (``collected``)."""

    ids: tuple[str, ...] = ()
    source: Literal["named", "collected"] = "collected"
    note: str = ""  # what the pre-pass could not list (collection errors in the starting copy)


def required_from_collection(channel: Channel) -> Required | None:
    """The pre-pass's required tests, or None when the reporter did not run
    on the starting copy (then the verdict can only be the exit code's)."""
    if channel.starts == 0:
        return None
    notes = []
    if channel.collect_errors:
        notes.append(f"{len(channel.collect_errors)} collection error(s) in the starting copy")
    if channel.ends == 0 or channel.problems:
        notes.append("the pre-pass did not end cleanly; its list may be short")
    note = "; ".join(notes)
    return Required(ids=tuple(dict.fromkeys(channel.collected)), source="collected", note=note)


class Evidence(Frozen):
    """What a submit's verdict rests on, recorded with the submit."""

    kind: Literal["pytest", "exit code only"]
    passed: bool
    required: int = 0
    seen_passing: int = 0
    failed_ids: tuple[str, ...] = ()  # required tests not seen passing
    reasons: tuple[str, ...] = ()
    source: str = ""
    note: str = ""

    @property
    def line(self) -> str:
        """``evidence: 12 of 12 required tests passed`` or ``evidence: exit code only``."""
        if self.kind == "exit code only":
            return "evidence: exit code only" + (f" ({self.note})" if self.note else "")
        return f"evidence: {self.seen_passing} of {self.required} required tests passed"


def exit_code_only(exit_code: int | None, timed_out: bool, note: str = "") -> Evidence:
    return Evidence(kind="exit code only", passed=exit_code == 0 and not timed_out, note=note)


def judge(exit_code: int | None, timed_out: bool, channel: Channel, required: Required) -> Evidence:
    """The evidence rule: exit 0, one session that started and ended through
    the reporter, and every required test seen passing."""
    reasons: list[str] = []
    if timed_out:
        reasons.append("the verify command timed out")
    elif exit_code != 0:
        reasons.append(f"the verify command exited {exit_code}")
    if channel.truncated:
        reasons.append("the reporter's channel is over its cap")
    if channel.problems:
        shown = "; ".join(channel.problems[:3])
        reasons.append(f"the channel holds {len(channel.problems)} line(s) the reporter did not write ({shown})")
    if channel.starts == 0:
        reasons.append("the reporter never started: pytest did not run with it")
    elif channel.starts > 1:
        reasons.append(f"pytest started {channel.starts} times (re-executed)")
    if channel.starts and channel.ends == 0:
        reasons.append("the test run ended early: pytest's session did not end through the reporter")
    if channel.ends and channel.end_status not in (0, None) and exit_code == 0:
        reasons.append(f"the exit code is 0 but pytest's own session ended with status {channel.end_status}")
    deselected = set(channel.deselected)
    failed: list[str] = []
    for ident in required.ids:
        seen = channel.tests.get(ident)
        if seen is not None and seen.outcome == "passed":
            continue
        failed.append(ident)
        why = ("deselected" if ident in deselected and seen is None else "not run" if seen is None
               else seen.outcome)
        if len(reasons) < MAX_SHOWN_REASONS:
            reasons.append(f"required test {why}: {ident}")
    if len(failed) > MAX_SHOWN_REASONS:
        reasons.append(f"… {len(failed)} required tests not seen passing in all")
    return Evidence(kind="pytest", passed=not reasons, required=len(required.ids),
                    seen_passing=len(required.ids) - len(failed), failed_ids=tuple(failed), reasons=tuple(reasons),
                    source=required.source, note=required.note)


def quotes_any(message: str, lines: frozenset[str]) -> bool:
    """Whether ``message`` holds one of ``lines`` (a hidden or reference
    test's own lines, ``secret_lines``): such a message is withheld."""
    return any(line in message for line in lines)


def secret_lines(text: str, shortest: int = 8) -> frozenset[str]:
    """The lines of a file never quoted back, stripped, that are long enough
    to say something of it."""
    return frozenset(s for line in text.splitlines() if len(s := line.strip()) >= shortest)


def test_file(test_id: str) -> str:
    """The file part of a pytest node id (``tests/test_x.py::T::t[a]``)."""
    return test_id.split("::", 1)[0]


test_file.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def summary_lines(evidence: Evidence, channel: Channel,
                  quotable: Callable[[str, str], bool] | None = None) -> list[str]:
    """What a submit's observation says of the evidence: the evidence line,
    the reasons of a FAIL, and the failure messages of failed required tests
    that ``quotable(test file, message)`` accepts (all when None): hidden and
    reference tests are never quoted."""
    lines = [evidence.line]
    if evidence.note and evidence.kind == "pytest":
        lines.append(f"note: {evidence.note}")
    lines += [f"  {r}" for r in evidence.reasons]
    for ident in evidence.failed_ids[:MAX_SHOWN_IDS]:
        seen = channel.tests.get(ident)
        if seen is None or not seen.message:
            continue
        if quotable is not None and not quotable(test_file(ident), seen.message):
            continue
        lines.append(f"  {ident}: {seen.message}")
    return lines
