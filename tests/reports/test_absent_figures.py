"""An absent figure is shown as absent, never as 0 (issue 27, point 4): a
server that sends no cached-token count, and a FAULTED call with no usage
at all, read "absent" (or "-" in a table or on a page) in ``show``, the
live display's lines, the viewer's run page and the ATIF export; JSON keeps
the ``*_source: "absent"`` beside the recorded 0."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from cli.display.render import model_heading, model_line
from cli.display.steps import model_step
from cli.main import app
from cli.view.export import export_bundle
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope, ErrorDetail, Payload, Status, Timings, Usage
from store import Recorder, Store

NO_CACHE_COUNT = Envelope(
    status=Status.COMPLETED, payload=Payload(text="looking"), finish_reason="stop", http_status=200,
    usage=Usage(prompt_tokens=1200, completion_tokens=40, prompt_source="server", completion_source="server"),
    timings=Timings(ttft_s=0.1, decode_s=0.2, total_s=0.3), model="m",
)
FAULTED = Envelope(
    status=Status.FAULTED, http_status=200, error=ErrorDetail(kind="malformed", message="not JSON"),
    timings=Timings(total_s=0.2), model="m",
)


def record_run(store: Store) -> str:
    recorder = Recorder(store)
    run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
    for turn, envelope in enumerate((NO_CACHE_COUNT, FAULTED)):
        with recorder.turn(run_id, turn) as tx:
            request = ModelRequest(model="m", messages=(Message(role="user", content="t"),), max_tokens=64,
                                   sampling=Sampling(temperature=0.0))
            tx.envelope(tx.request(request), envelope)
            tx.commit([Message(role="assistant", content="x")])
    recorder.finish_run(run_id, "FAULTED", "the model's answer was not JSON", turn=2)
    return run_id


def test_the_terminal_lines_say_absent() -> None:
    faulted = model_step(1, FAULTED)
    assert faulted.prompt_tokens is None and faulted.completion_tokens is None
    assert "tokens absent" in model_heading(faulted).plain and "0 in" not in model_heading(faulted).plain
    assert "[tokens absent]" in model_line(faulted)
    assert "1,200 in, 40 out" in model_heading(model_step(0, NO_CACHE_COUNT)).plain


def test_show_the_viewer_and_atif_say_absent(store: Store, home: Path, tmp_path: Path) -> None:
    run_id = record_run(store)
    shown = CliRunner().invoke(app, ["show", run_id, "--full"])
    assert shown.exit_code == 0, shown.output
    assert "tokens in 1,200 (cached absent) out 40" in shown.output
    assert "tokens in absent (cached absent) out absent" in shown.output and "tokens absent" in shown.output
    assert "(cached 0)" not in shown.output and "0 in, 0 out" not in shown.output

    as_json = json.loads(CliRunner().invoke(app, ["show", run_id, "--json"]).output)
    response = as_json["turns"][0]["calls"][0]["response"]
    assert response["cached_input_tokens"] == 0 and response["cached_input_tokens_source"] == "absent"

    export_bundle(store, tmp_path / "bundle", [run_id])
    page = re.sub(r"<[^>]+>", "", (tmp_path / "bundle" / f"run-{run_id}.html").read_text(encoding="utf-8"))
    flat = " ".join(page.split())
    assert "in 1200 (cached -, prefilled -) · out 40" in flat
    assert "in - (cached -, prefilled -) · out -" in flat
    assert "tokens cached - · prefilled - · output -" in flat  # the FAULTED turn's sums

    out = tmp_path / "run.atif.json"
    atif = CliRunner().invoke(app, ["export", run_id, "--format", "atif", "--include-unverified", "-o", str(out)])
    assert atif.exit_code == 0, atif.output
    final = json.loads(out.read_text(encoding="utf-8"))["final_metrics"]
    assert "total_cached_tokens" not in final and final["total_prompt_tokens"] == 1200
