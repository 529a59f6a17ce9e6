"""``--json`` is JSON (issue 27): every command that takes ``--json`` is run
as a real subprocess with warnings forced through structlog, the standard
``logging`` module and ``warnings`` once the command has started, and its
stdout must parse as JSON. Before, structlog's default logger printed to
stdout, so ``escrow batch --json`` began with "model has no price ..." and
``| jq`` failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import COMMANDS, MODULES, commands_of
from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.composition.batch.driver import BatchPlan, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.tasks import load_task_file

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = ROOT / "policies" / "default.toml"
FORCED = ("forced structlog warning", "forced logging warning", "forced python warning")

# The root callback runs before every command; this wraps it so that, once
# the CLI has set up its logging, a warning goes out by each of the three ways
# Python code warns. Nothing else of the command is changed.
PROBE = """
import functools, logging, sys, warnings
import structlog
import cli.main as m
info = m.app.registered_callback
original = info.callback
@functools.wraps(original)
def forced(*args, **kwargs):
    original(*args, **kwargs)
    structlog.get_logger("probe").warning("forced structlog warning")
    logging.getLogger("probe").warning("forced logging warning")
    warnings.warn("forced python warning")
info.callback = forced
sys.argv = ["escrow", *sys.argv[1:]]
m.main()
"""

# Commands with --json that need what this test does not stand up, and where
# their stdout is parsed instead.
ELSEWHERE = {
    "run": "a sandbox: tests/e2e/test_run_cli.py parses its --json stdout, with the real no-price warning",
    "parity": "a run recorded by the loop (a run spec), re-sent to a model",
    "replay": "a run recorded by the loop (a run spec); a scripted run is refused with exit 2",
    "verify-patch": "a sandbox: tests/e2e/test_verify_patch.py parses its --json stdout",
    "sandbox build": "builds an image",
    "sandbox gc": "a Docker daemon",
    "sandbox doctor": "a Docker daemon",
    "score": "a teacher and a student server: tests/tokens/test_teacher_scoring.py parses its --json stdout",
    "fault-server": "a server that runs until Ctrl-C; its one JSON line is read in tests/client",
}


def json_commands() -> set[str]:
    """Every command (and sub-command) with a --json option."""
    found: set[str] = set()

    def walk(prefix: str, command: object) -> None:
        sub = getattr(command, "commands", None)
        if sub:
            for name, child in sub.items():
                walk(f"{prefix} {name}", child)
        elif any("--json" in getattr(p, "opts", ()) for p in getattr(command, "params", ())):
            found.add(prefix)

    for module in MODULES:
        for name, command in commands_of(module).items():
            walk(name, command)
    return found


def escrow(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"ESCROW_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def recorded(scripted, home: Path, tmp_path: Path) -> dict[str, str]:
    run_id = scripted.record(scripted.GROWING)
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text(json.dumps({"id": "t1", "repo": str(tmp_path), "task": "fix it", "verify": "true"}) + "\n")
    plan = BatchPlan(tasks_dir=str(tmp_path), model_urls=("http://127.0.0.1:1/v1",), options=PoolOptions(workers=1))
    batch_id = start_batch(scripted.store, load_task_file(task_file), plan)
    sample = next((ROOT / "tests" / "data" / "interop" / "atif").glob("*.json"))
    return {"run": run_id, "batch": batch_id, "sample": str(sample)}


def test_every_command_with_json_is_covered() -> None:
    covered = {name for name, _ in CASES}
    assert json_commands() - covered - set(ELSEWHERE) == set()
    assert set(ELSEWHERE) <= json_commands() and COMMANDS


# (the command as json_commands names it, its argv)
CASES: list[tuple[str, tuple[str, ...]]] = [
    ("runs", ("runs", "--json")),
    ("report", ("report", "{run}", "--json")),
    ("report", ("report", "--json")),
    ("show", ("show", "{run}", "--json")),
    ("tokens", ("tokens", "{run}", "--json")),
    ("verify", ("verify", "{run}", "--json")),
    ("gc", ("gc", "--older-than", "3650d", "--json")),
    ("price show", ("price", "show", "--json")),
    ("price set", ("price", "set", "some-model", "--input", "1", "--json")),
    ("policy check", ("policy", "check", str(DEFAULT_POLICY), "--json")),
    ("policy show-default", ("policy", "show-default", "--json")),
    ("import", ("import", "{sample}", "--json")),
    ("batch", ("batch", "status", "{batch}", "--json")),
    ("batch", ("batch", "report", "{batch}", "--json")),
    ("batch", ("batch", "list", "--json")),
    ("runs", ("runs", "--batch", "{batch}", "--json")),
    ("call", ("call", "hello", "--model-url", "{url}", "--json")),
]


@pytest.mark.parametrize("argv", [argv for _, argv in CASES], ids=[" ".join(a[:2]) for _, a in CASES])
def test_json_stdout_parses_with_warnings_forced(argv: tuple[str, ...], recorded: dict[str, str], home: Path,
                                                 fault_server: FaultServer) -> None:
    fault_server.script([Reply(text="hi")])
    values = {**recorded, "url": fault_server.base_url}
    done = escrow(home, *(a.format(**values) for a in argv))
    assert "Traceback" not in done.stderr, done.stderr
    for warning in FORCED:
        assert warning in done.stderr  # the warnings really went out, on stderr
    assert done.stdout.strip(), (done.returncode, done.stderr)
    json.loads(done.stdout)  # (import: one object per file, and one file here)


def test_the_probe_can_fail_structlog_unconfigured_prints_to_stdout(home: Path) -> None:
    """Without the CLI's set-up, the forced structlog warning lands on stdout:
    the check above would see a warning in front of the JSON."""
    code = "import structlog; structlog.get_logger('probe').warning('forced structlog warning')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "forced structlog warning" in done.stdout

