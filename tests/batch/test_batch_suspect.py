"""A batch where one task's fix carries an atexit handler: that task ends
SUSPECT and the batch counts it apart (never a pass), in its progress line,
its report and the report's JSON; the other task passes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import Reply, ScriptedToolCall
from orchestrator.composition.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.composition.batch.live_counts import BatchProgress
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from tests.batch.conftest import EXAMPLES

pytestmark = [pytest.mark.docker]

HANDLER = "import atexit\natexit.register(print)\n"


def with_handler(script: list[Reply]) -> list[Reply]:
    """The known fix, each Python file it writes opening with an atexit handler."""
    out = []
    for step in script:
        calls = []
        for c in step.tool_calls:
            args = json.loads(c.arguments)
            if c.name == "write_file" and args["path"].endswith(".py"):
                args["content"] = HANDLER + args["content"]
            calls.append(ScriptedToolCall(name=c.name, arguments=json.dumps(args)))
        out.append(step.model_copy(update={"tool_calls": tuple(calls)}))
    return out


def test_a_suspect_task_is_counted_apart_from_the_passes(settings, fault_server, fix_scripts):
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    chosen = ("calc-mean", "roman-four")
    subset = task_file.model_copy(update={"tasks": tuple(t for t in task_file.tasks if t.id in chosen)})
    fault_server.script_for("calc-mean", with_handler(fix_scripts["calc-mean"]))
    fault_server.script_for("roman-four", fix_scripts["roman-four"])
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    progress = BatchProgress(total=2)
    with Store.open(settings.store_url) as store:
        plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,), options=PoolOptions(workers=2, start_slots=1))
        batch_id = start_batch(store, subset, plan)
        results = run_batch(store, settings, batch_id)
    for result in results:
        progress.attempt(result)
    assert {r.task_id: r.verdict for r in results} == {"calc-mean": "SUSPECT", "roman-four": "PASS"}, results
    assert (progress.passed, progress.suspect, progress.failed) == (1, 1, 0)
    assert "passed 1 · suspect 1 · failed 0" in progress.line(running=0)

    runner = CliRunner()
    shown = runner.invoke(app, ["batch", "report", batch_id, "--json", "--db", settings.store_url])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert (report["done"], report["passed"], report["suspect"], report["pass_rate"]) == (2, 1, 1, 0.5)
    assert report["verdicts"] == {"PASS": 1, "SUSPECT": 1}
    text = runner.invoke(app, ["batch", "report", batch_id, "--db", settings.store_url])
    flat = " ".join(text.stdout.split())
    assert "passed 1 (50%)" in flat and "suspect 1 (not passes)" in flat
