"""The evidence rule and the channel's parser (orchestrator/evidence.py):
hostile lines, caps, sequence breaks, and each way a run fails to show its
required tests passing. The reporter itself runs under the host's pytest
in tests/sandbox/test_evidence_reporter.py and in the image end to end."""

from __future__ import annotations

import json

import pytest

from orchestrator.evidence import (
    MAX_CHANNEL_BYTES,
    MAX_LINE_BYTES,
    MAX_MESSAGE_CHARS,
    Channel,
    Required,
    is_pytest_command,
    judge,
    parse_channel,
    required_from_collection,
    summary_lines,
)


def lines(*records: dict, pid: int = 7, start: bool = True, end: int | None = 0) -> bytes:
    out = [{"kind": "start", "mode": "run"}] if start else []
    out += list(records)
    if end is not None:
        out.append({"kind": "end", "exitstatus": end})
    return b"".join(json.dumps({"pid": pid, "seq": n, **r}).encode() + b"\n" for n, r in enumerate(out))


def test(ident: str, outcome: str = "passed", message: str = "") -> dict:
    return {"kind": "test", "id": ident, "outcome": outcome, "message": message}


test.__test__ = False  # type: ignore[attr-defined]
REQUIRED = Required(ids=("t.py::a", "t.py::b"))


def test_every_required_test_passing_in_one_ended_session_is_pass():
    evidence = judge(0, False, parse_channel(lines(test("t.py::a"), test("t.py::b"))), REQUIRED)
    assert evidence.passed and evidence.line == "evidence: 2 of 2 required tests passed"


@pytest.mark.parametrize(("channel", "exit_code", "reason"), [
    (lines(test("t.py::a"), test("t.py::b"), end=None), 0, "ended early"),
    (lines(test("t.py::a")), 0, "required test not run: t.py::b"),
    (lines(test("t.py::a"), test("t.py::b", "skipped")), 0, "required test skipped: t.py::b"),
    (lines(test("t.py::a"), test("t.py::b", "failed")), 0, "required test failed: t.py::b"),
    (lines(test("t.py::a"), {"kind": "deselected", "id": "t.py::b"}), 0, "required test deselected: t.py::b"),
    (lines(test("t.py::a"), test("t.py::b")) + lines(test("t.py::a"), test("t.py::b")), 0, "started 2 times"),
    (lines(test("t.py::a"), test("t.py::b"), end=1), 0, "session ended with status 1"),
    (b"", 0, "never started"),
    (lines(test("t.py::a"), test("t.py::b")), 1, "exited 1"),
])
def test_each_way_of_not_showing_the_tests_passing_is_fail_with_its_reason(channel, exit_code, reason):
    evidence = judge(exit_code, False, parse_channel(channel), REQUIRED)
    assert not evidence.passed
    assert any(reason in r for r in evidence.reasons), evidence.reasons


@pytest.mark.parametrize("hostile", [
    b"not json\n",
    b'{"kind": "test", "id": "t.py::b", "outcome": "passed"}\n',  # no pid, no sequence
    b'[1, 2]\n',
    b'{"kind": "test", "pid": 7, "seq": 1, "id": "t.py::b", "outcome": "passed"}\n',  # a sequence number reused
    b'{"kind": "test", "pid": 9, "seq": 0, "id": "t.py::b", "outcome": "passed"}\n',  # a process that never started
    b'{"kind": "test", "pid": 7, "seq": 4, "id": "t.py::b", "outcome": "victory"}\n',
    b'{"kind": "test", "pid": true, "seq": 4, "id": "t.py::b", "outcome": "passed"}\n',
    b'{"kind": "bogus", "pid": 7, "seq": 4}\n',
    b'{"kind": "test", "pid": 7, "seq": 4, "id": "' + b"x" * MAX_LINE_BYTES + b'", "outcome": "passed"}\n',
    b'\xff\xfe\n',
    b"[" * 100_000 + b"\n",
])
def test_a_line_the_reporter_did_not_write_is_a_problem_and_fails_the_run(hostile):
    data = lines(test("t.py::a"), test("t.py::b"), end=None) + hostile
    data += json.dumps({"kind": "end", "pid": 7, "seq": 3, "exitstatus": 0}).encode() + b"\n"
    channel = parse_channel(data)
    assert channel.problems
    evidence = judge(0, False, channel, REQUIRED)
    assert not evidence.passed and any("did not write" in r for r in evidence.reasons)


def test_a_last_line_without_a_newline_is_a_problem():
    assert "line 4: not ended by a newline" in parse_channel(lines(test("t.py::a")) + b"{\"kind\"").problems


def test_the_channel_is_read_under_its_cap_and_a_truncated_channel_fails():
    big = lines(*(test(f"t.py::x{n}", message="m" * 200) for n in range(30_000)))
    assert len(big) > MAX_CHANNEL_BYTES
    channel = parse_channel(big)
    assert channel.truncated and len(channel.tests) < 30_000
    assert not judge(0, False, channel, Required()).passed
    assert not judge(0, False, parse_channel(lines(), truncated=True), Required()).passed


def test_ids_and_messages_are_capped():
    channel = parse_channel(lines(test("t.py::a", "failed", "boom " * 1000)))
    assert len(channel.tests["t.py::a"].message) == MAX_MESSAGE_CHARS


def test_the_last_outcome_of_a_test_is_the_one_that_counts():
    channel = parse_channel(lines(test("t.py::a", "passed"), test("t.py::a", "failed"), test("t.py::b")))
    assert not judge(0, False, channel, REQUIRED).passed


def test_the_pre_pass_lists_what_it_collected_and_notes_collection_errors():
    collected = lines({"kind": "collected", "id": "t.py::a"}, {"kind": "collected", "id": "t.py::a"},
                      {"kind": "collect_error", "id": "u.py"})
    required = required_from_collection(parse_channel(collected))
    assert required is not None and required.ids == ("t.py::a",) and "1 collection error" in required.note
    assert required_from_collection(Channel()) is None  # the reporter never ran: exit code only


@pytest.mark.parametrize(("command", "pytest_"), [
    ("python3 -m pytest -q", True), ("pytest", True), ("cd sub && /usr/bin/pytest-3 -x", True),
    ("py.test tests", True), ("make test", False), ("python3 run_tests.py", False), ("echo pytest-like", False),
    ("bash -c 'unbalanced", False), ("bash -c 'cd src && python3 -m pytest -x'", True), ("x=1 pytest", True),
])
def test_only_a_pytest_command_asks_for_evidence(command, pytest_):
    assert is_pytest_command(command) is pytest_


def test_a_summary_quotes_only_messages_of_tests_the_model_may_read():
    channel = parse_channel(lines(test("t.py::a", "failed", "assert 1 == 2"),
                                  test("hidden.py::b", "failed", "SECRET expected value")))
    evidence = judge(1, False, channel, Required(ids=("t.py::a", "hidden.py::b")))
    shown = "\n".join(summary_lines(evidence, channel, lambda path, message: path != "hidden.py"))
    assert "t.py::a: assert 1 == 2" in shown and "hidden.py::b" in shown and "SECRET" not in shown
    assert evidence.line == "evidence: 0 of 2 required tests passed"
