"""Task files: both row forms, malformed rows named by line, repeated ids refused;
the example tasks: each micro-repository reproducible, its test failing before
the known fix and passing after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.composition.batch.errors import RepoError, TaskFileError
from orchestrator.composition.batch.microrepo import example_rows, git, materialise
from orchestrator.composition.batch.repos import prepare_repo
from orchestrator.composition.batch.tasks import load_task_file, parse_row
from orchestrator.composition.launch import RunRequest
from orchestrator.composition.launch.compose import with_task_inputs
from policies import default_policy
from tests.batch.conftest import EXAMPLES

SWE = {"instance_id": "a", "repo": "o/n", "base_commit": "abc1234", "problem_statement": "fix it",
       "FAIL_TO_PASS": '["t.py::test_x"]', "PASS_TO_PASS": ["t.py::test_y"]}
PLAIN = {"id": "b", "repo": ".", "task": "do it", "verify": "true", "max_turns": 3}


def write(tmp_path, rows):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_both_forms_parse():
    swe = parse_row(SWE, 1)
    assert swe.form == "swebench" and swe.commit == "abc1234"
    assert swe.verify.endswith("t.py::test_x t.py::test_y")  # JSON text lists are decoded
    plain = parse_row(PLAIN, 2)
    assert plain.form == "escrow" and plain.overrides.max_turns == 3 and plain.verify == "true"


def test_a_swebench_test_patch_and_a_tasks_hidden_globs_reach_the_task():
    swe = parse_row({**SWE, "test_patch": "diff --git a/t.py b/t.py\n"}, 1)
    assert swe.verify_patch == "diff --git a/t.py b/t.py\n" and parse_row(SWE, 1).verify_patch is None
    plain = parse_row({**PLAIN, "hidden": ["tests/**", "secret_test.py"]}, 2)
    assert plain.overrides.hidden == ("tests/**", "secret_test.py")


@pytest.mark.parametrize("bad, words", [
    (json.dumps({**PLAIN, "id": "c", "hidden": ["../up/**"]}), "hidden"),
    (json.dumps({**PLAIN, "id": "c", "hidden": ["/abs"]}), "hidden"),
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"x": 1}), "neither"),
    (json.dumps({**SWE, "instance_id": "c", "base_commit": "main; rm -rf /"}), "base_commit"),
    (json.dumps({**SWE, "instance_id": "c", "FAIL_TO_PASS": []}), "FAIL_TO_PASS"),
    (json.dumps({**PLAIN, "id": "c", "max_turns": 0}), "max_turns"),
    (json.dumps({**PLAIN, "id": "c", "surprise": 1}), "surprise"),
])
def test_a_malformed_row_is_named_by_line_and_the_others_still_load(tmp_path, bad, words):
    loaded = load_task_file(write(tmp_path, [SWE, "", bad, PLAIN]))
    assert [t.id for t in loaded.tasks] == ["a", "b"]
    (error,) = loaded.errors
    assert error.startswith("line 3:") and words in error


def test_repeated_ids_refuse_the_file_naming_both_lines(tmp_path):
    with pytest.raises(TaskFileError, match=r"'a' appears on line 1 and line 3"):
        load_task_file(write(tmp_path, [SWE, PLAIN, {**PLAIN, "id": "a"}]))


def test_unreadable_and_empty_files_are_clear_errors(tmp_path):
    with pytest.raises(TaskFileError, match="cannot read"):
        load_task_file(tmp_path / "missing.jsonl")
    with pytest.raises(TaskFileError, match="no tasks"):
        load_task_file(write(tmp_path, [""]))


def test_parquet_rows_load_like_lines(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist([SWE, {**SWE, "instance_id": "z", "base_commit": "nothex"}]), path)
    loaded = load_task_file(path)
    assert [t.id for t in loaded.tasks] == ["a"] and loaded.errors[0].startswith("line 2:")


def test_the_shipped_task_file_matches_its_micro_repositories():
    """base_commit is reproducible: materialising again gives the committed ids."""
    shipped = [json.loads(line) for line in (EXAMPLES / "tasks.jsonl").read_text().splitlines()]
    assert example_rows(EXAMPLES) == shipped
    assert len(shipped) >= 12 and len(load_task_file(EXAMPLES / "tasks.jsonl").tasks) == len(shipped)


def test_a_micro_repository_that_changed_is_refused(tmp_path):
    task = load_task_file(EXAMPLES / "tasks.jsonl").task("calc-mean")
    moved = task.model_copy(update={"commit": "0" * 40})
    with pytest.raises(RepoError, match="regenerate"):
        prepare_repo(moved, EXAMPLES, tmp_path)


def test_a_plain_row_checks_out_a_local_repository_at_its_commit(tmp_path):
    commit = materialise(EXAMPLES / "leap-400" / "repo", tmp_path / "origin")
    (tmp_path / "origin" / "leap.py").write_text("changed after the commit\n")
    task = parse_row({**PLAIN, "repo": "origin", "commit": commit}, 1)
    repo = prepare_repo(task, tmp_path, tmp_path / "work")
    assert git(repo, "rev-parse", "HEAD") == commit and "changed" not in (repo / "leap.py").read_text()


@pytest.mark.parametrize("task_id", sorted(p.name for p in EXAMPLES.iterdir() if (p / "task.json").is_file()))
def test_each_example_fails_before_its_fix_and_passes_after(tmp_path, task_id):
    task = load_task_file(EXAMPLES / "tasks.jsonl").task(task_id)
    repo = prepare_repo(task, EXAMPLES, tmp_path)
    tests = task.verify.split("cacheprovider ", 1)[1].split()
    meta = json.loads((EXAMPLES / task_id / "task.json").read_text())

    def pytest_ids(ids):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids], cwd=repo,
                              capture_output=True, text=True).returncode

    assert pytest_ids(meta["FAIL_TO_PASS"]) == 1 and pytest_ids(meta["PASS_TO_PASS"]) == 0
    git(repo, "apply", str(EXAMPLES / task_id / "fix.patch"))
    assert pytest_ids(tests) == 0


def test_a_tasks_hidden_globs_and_test_patch_paths_reach_its_policy():
    patch = "diff --git a/t/ref.py b/t/ref.py\nnew file mode 100644\n--- /dev/null\n+++ b/t/ref.py\n@@ -0,0 +1 @@\n+x\n"
    task = parse_row({**PLAIN, "hidden": ["secret_test.py"]}, 1)
    request = RunRequest(task=task.task, repo=Path("."), verify=task.verify, hidden=task.overrides.hidden or (),
                         verify_patch=patch)
    policy = with_task_inputs(default_policy(), request)
    assert policy.verify.hidden == ("secret_test.py",) and policy.verify.protect[-1] == "t/ref.py"
    assert policy.verify.protect[:-1] == default_policy().verify.protect
    assert with_task_inputs(default_policy(), request.model_copy(update={"hidden": (), "verify_patch": None})) \
        == default_policy()
