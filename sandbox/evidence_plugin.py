"""Escrow's trusted pytest reporter, installed in the sandbox image as
``escrow_evidence`` (site-packages on the read-only root) and loaded through
``PYTEST_PLUGINS`` before any conftest or test module of the repository.

It writes one JSON line per record to the file ``$ESCROW_EVIDENCE`` (opened
O_APPEND, each line one ``os.write``: nothing buffered is lost when the
process dies): a start record, then per test its outcome computed from the
raw exception of each phase (``call.excinfo`` in the first
``pytest_runtest_makereport``, before any report exists that a hook could
rewrite), deselected tests, and an end record from ``pytest_sessionfinish``.
Under ``ESCROW_EVIDENCE_MODE=collect`` it lists the collected test ids.
The host reads the file after the command (``orchestrator/evidence.py``).

Runs in the image's Python (3.11) with only the standard library and pytest;
the host never imports it.
"""

import json
import os

import pytest
from _pytest.outcomes import Skipped

_MESSAGE_CHARS = 300
_state = {"fd": -1, "seq": 0}
_phases: dict = {}


def _emit(kind, **fields):
    fd = _state["fd"]
    if fd < 0:
        return
    record = {"kind": kind, "pid": os.getpid(), "seq": _state["seq"], **fields}
    _state["seq"] += 1
    line = (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")
    try:
        os.write(fd, line)
    except OSError:
        pass


def pytest_configure(config):
    path = os.environ.get("ESCROW_EVIDENCE")
    if not path or _state["fd"] >= 0:
        return
    try:
        _state["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    _emit("start", mode=os.environ.get("ESCROW_EVIDENCE_MODE", "run"))


def pytest_collectreport(report):
    if report.failed:
        _emit("collect_error", id=report.nodeid or ".")


def pytest_deselected(items):
    for item in items:
        _emit("deselected", id=item.nodeid)


def pytest_collection_finish(session):
    if os.environ.get("ESCROW_EVIDENCE_MODE") != "collect":
        return
    for item in session.items:
        if item.get_closest_marker("xfail") is None:  # an expected failure is never required to pass
            _emit("collected", id=item.nodeid)


def _outcome(excinfo):
    if excinfo is None:
        return "passed", ""
    if excinfo.errisinstance(Skipped):
        return "skipped", ""
    try:
        message = excinfo.exconly()
    except Exception:  # a hostile exception's __str__
        message = excinfo.typename
    return "failed", " ".join(message.split())[:_MESSAGE_CHARS]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome, message = _outcome(call.excinfo)
    seen = _phases.setdefault(item.nodeid, [])
    seen.append((call.when, outcome, message))
    if call.when != "teardown":
        return None
    _phases.pop(item.nodeid, None)
    worst = next((o for o in seen if o[1] == "failed"), None) or next((o for o in seen if o[1] == "skipped"), None)
    if worst is None and not any(when == "call" for when, _, _ in seen):
        worst = ("call", "failed", "the test's call phase never ran")
    final, text = ("passed", "") if worst is None else (worst[1], worst[2])
    _emit("test", id=item.nodeid, outcome=final, message=text)
    return None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _emit("end", exitstatus=int(exitstatus), testsfailed=int(session.testsfailed))
