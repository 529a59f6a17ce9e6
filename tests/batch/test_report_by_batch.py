"""``escrow report --by batch``: runs grouped by the batch that ran them, runs
outside any batch apart; the TTFT histogram keyed the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from store import Recorder, Store
from store.write import batches as bstore
from store.write.synthetic import record_run

ESCROW = Path(sys.executable).parent / "escrow"


def test_report_groups_runs_by_batch(tmp_path):
    home = tmp_path / "home"
    with Store.open(f"sqlite:///{home / 'escrow.db'}") as store:
        recorder = Recorder(store)
        runs = [record_run(recorder, turns=2, seed=seed) for seed in (1, 2, 3)]
        batch_id = bstore.create_batch(store, task_file="t.jsonl", tasks={"a": (1, {}), "b": (2, {})}, settings={})
        for task_id, run_id in zip(("a", "b"), runs[:2], strict=True):
            attempt = bstore.start_attempt(store, batch_id, task_id)
            bstore.finish_attempt(store, attempt, outcome=bstore.MODEL, run_id=run_id, verdict="PASS")
    done = subprocess.run([str(ESCROW), "report", "--since", "3650d", "--by", "batch", "--json"], capture_output=True,
                          text=True, env={**os.environ, "ESCROW_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    groups = {g["batch"]: g["runs"] for g in json.loads(done.stdout)["groups"]}
    assert groups == {batch_id: 2, "(no batch)": 1}
