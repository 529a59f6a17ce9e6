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
    assert "cached 0 (absent)" in text  # the usage line's own way: the 0 beside its source


def test_what_the_server_said_is_shown() -> None:
    text = shown(Envelope(status=Status.COMPLETED, model="gemma-3-270m", engine="llama.cpp"))
    assert "gemma-3-270m (engine llama.cpp)" in text and "fingerprint" not in text
