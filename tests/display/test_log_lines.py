"""The CLI's human log lines fit the terminal: a pipe is 80 columns wide."""

from __future__ import annotations

import structlog

from cli.logging_setup import configure_logging


def _logged(capsys, monkeypatch, columns: str, **values) -> str:
    monkeypatch.setenv("COLUMNS", columns)
    configure_logging(json_lines=False)
    try:
        structlog.get_logger().info("sandbox runtime", **values)
    finally:
        structlog.reset_defaults()
    return capsys.readouterr().err


def test_a_long_log_line_folds_at_words_to_80_columns(capsys, monkeypatch):
    why = "auto: dockerd has no runsc, so runc (the host's kernel); to use gVisor, run scripts/setup.sh"
    err = _logged(capsys, monkeypatch, "80", runtime="runc", why=why)
    lines = err.splitlines()
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines)
    assert lines[1].startswith("    ")  # a continuation is indented under its line
    whole = _logged(capsys, monkeypatch, "1000", runtime="runc", why=why).strip()
    assert " ".join(line.strip() for line in lines) == whole  # folded at spaces, nothing lost


def test_a_wide_terminal_keeps_the_line_whole(capsys, monkeypatch):
    err = _logged(capsys, monkeypatch, "200", runtime="runsc", why="auto: dockerd has runsc (gVisor)")
    assert err.splitlines() == ["sandbox runtime · runtime runsc · why auto: dockerd has runsc (gVisor)"]


def test_a_line_is_a_notice_not_a_log_record(capsys, monkeypatch):
    """Issue 42: on a terminal the run opened with ``[info     ] sandbox
    runtime runtime=...``; a person reads a notice in the display's style."""
    monkeypatch.setenv("COLUMNS", "80")
    configure_logging(json_lines=False)
    try:
        structlog.get_logger().warning("model has no price; its calls cost $0", model="m",
                                       hint="escrow price set MODEL ...")
    finally:
        structlog.reset_defaults()
    err = capsys.readouterr().err
    want = "warning: model has no price; its calls cost $0 · model m · hint escrow price set MODEL ..."
    assert " ".join(err.split()) == want
    assert "[warning" not in err and "=" not in err


def test_controls_in_a_logged_value_are_escaped_before_folding(capsys, monkeypatch):
    err = _logged(capsys, monkeypatch, "80", path="a\x1b]52;c;aGk=\x07" + " word" * 30)
    assert "\x1b" not in err and "\x07" not in err and "\\x1b" in err
    assert all(len(line) <= 80 for line in err.splitlines())
