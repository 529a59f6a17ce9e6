"""``escrow call``'s envelope says absent for what the server did not send
(issue 27: it printed ``model None (engine None, fingerprint None)``)."""

from __future__ import annotations

import io

from rich.console import Console

from cli.call_cmd import render_envelope
from orchestrator.envelope import Envelope, ErrorDetail, Status


def shown(envelope: Envelope) -> str:
    out = io.StringIO()
    render_envelope(envelope, Console(file=out, width=80, color_system=None))
    return out.getvalue()


def test_a_model_the_server_did_not_name_reads_absent() -> None:
    text = shown(Envelope(status=Status.FAULTED, error=ErrorDetail(kind="malformed", message="x")))
    assert "None" not in text and "model" in text and "absent (the server named none)" in text
    # Absent, not 0 (issue 42: it read "prompt 0 (absent), cached 0 (absent)").
    assert "prompt absent, cached absent, completion absent" in text and "0 (absent)" not in text


def test_what_the_server_said_is_shown() -> None:
    text = shown(Envelope(status=Status.COMPLETED, model="gemma-3-270m", engine="llama.cpp"))
    assert "gemma-3-270m (engine llama.cpp)" in text and "fingerprint" not in text


def test_a_stopped_server_gives_absent_figures_in_text_and_json(tmp_path, monkeypatch) -> None:
    """Against a port nothing listens on: every figure the server did not
    send is absent in the text and null in --json, beside its source."""
    import json
    import socket

    from typer.testing import CliRunner

    from cli.main import app

    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    with socket.socket() as probe:  # a port just freed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    got = CliRunner().invoke(app, ["call", "hi", "--model-url", url, "--model", "m", "--deadline", "2", "--json"])
    usage = json.loads(got.stdout)["usage"]
    assert usage["cached_source"] == "absent" and usage["cached_prompt_tokens"] is None
    assert usage["prompt_tokens"] is None and usage["completion_tokens"] is None
    text = CliRunner().invoke(app, ["call", "hi", "--model-url", url, "--model", "m", "--deadline", "2"],
                               env={"COLUMNS": "80"})
    assert "prompt absent, cached absent, completion absent" in text.stdout and "0 (absent)" not in text.stdout
