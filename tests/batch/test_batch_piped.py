"""Issue 42, group 5: piped (CI, nohup), ``escrow batch`` says each task's
end as it comes (it printed nothing per task until the end), and its
per-task log lines do not bury the progress."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from orchestrator.composition.batch.tasks import load_task_file
from tests.batch.conftest import EXAMPLES
from tests.processes import ESCROW

pytestmark = [pytest.mark.docker]


def test_a_piped_batch_prints_a_line_per_task(tmp_path, fault_server, fix_scripts, sandbox_image) -> None:
    # Two of the example tasks, with their folders (a row's repository is found beside its file).
    rows = (EXAMPLES / "tasks.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    for row in rows:
        name = json.loads(row)["instance_id"]
        shutil.copytree(EXAMPLES / name, tmp_path / name)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(rows) + "\n", encoding="utf-8")
    ids = [t.id for t in load_task_file(tasks).tasks]
    for task_id in ids:
        fault_server.script_for(task_id, fix_scripts[task_id])
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home")}
    done = subprocess.run([str(ESCROW), "batch", str(tasks), "--model-url", url, "--workers", "1",
                           "--context-window", "8192", "--tokenizer", "cl100k_base", "--max-turns", "6"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    for n, task_id in enumerate(ids, start=1):
        line = next((line for line in lines if line.startswith(f"[{n}/{len(ids)}] {task_id}")), None)
        assert line is not None and "PASS" in line and "run " in line, done.stderr
    assert "[info" not in done.stderr and "sandbox runtime" not in done.stderr, done.stderr
    assert all(len(line) <= 80 for line in lines), done.stderr
