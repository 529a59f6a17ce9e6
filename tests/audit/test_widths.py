"""Issue 42, group 9, beside the audit of every command: the outputs that
need a run Escrow recorded itself, or a moment the audit's store cannot give,
read piped at COLUMNS=80 as real subprocesses, every line within 80 columns
(stdout and stderr). A replay (offline, ``--reexecute`` with a drift, a fork
with its new patch), ``show`` of a patch whose ``index`` line carries full
hashes, ``parity`` against a live server, ``gc`` that deletes, ``price set``
and ``policy check`` errors with long names, and Ctrl-C on a batch. A diff's
content lines are the one text printed whole (a line of code is never
folded), so they are left out of the count. The live footer, which only a
terminal shows, is checked at its mechanism in tests/display/test_live_footer.py."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import Fault, FaultServer
from tests.batch.conftest import subset_task_file
from tests.batch.test_batch_cli import wait_for
from tests.processes import ESCROW, cli_env
from tests.replay.recording import BROKEN_MEAN, FIXED_MEAN, call, reply
from tests.replay.test_live import docker_run as docker_run  # noqa: F401 - the fixture

pytestmark = pytest.mark.docker

WIDTH = 80
DIFF_TEXT = ("+", "-", " ", "@@", "diff --git")  # a diff's own lines, printed whole


def escrow(home: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(ESCROW), *argv], env=cli_env(home, COLUMNS=str(WIDTH)), capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    fits(done, argv)
    assert not check or done.returncode in (0, 1), shown(done, argv)
    return done


def shown(done: subprocess.CompletedProcess[str], argv: tuple[str, ...]) -> str:
    return f"escrow {' '.join(argv)} (exit {done.returncode})\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def fits(done: subprocess.CompletedProcess[str], argv: tuple[str, ...] = ()) -> None:
    assert "Traceback" not in done.stderr, shown(done, argv)
    wide = [line for line in done.stdout.splitlines() + done.stderr.splitlines()
            if len(line) > WIDTH and not line.startswith(DIFF_TEXT)]
    assert not wide, f"{len(wide)} lines over {WIDTH} columns:\n" + "\n".join(wide) + "\n" + shown(done, argv)


def test_a_recorded_run_replayed_forked_shown_priced_and_collected(docker_run, fault_server: FaultServer,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    db, repo, run_id = docker_run
    home, url = tmp_path / "audit-home", ["--db", f"sqlite:///{db}"]
    escrow(home, "replay", run_id, *url)
    fault_server.script([reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)),
                         reply(call("submit"))])
    forked = escrow(home, "replay", run_id, "--fork-at", "4", "--model-url", fault_server.base_url, *url)
    fork_id = next(line.split()[-1] for line in forked.stdout.splitlines() if "recorded as run" in line)
    patch = escrow(home, "show", fork_id, *url).stdout
    assert any(line.startswith("index ") for line in patch.splitlines()), patch  # its full hashes abbreviated
    calc = repo / "calc.py"  # a drift for --reexecute to report
    calc.write_text(calc.read_text().replace("A tiny calculator", "A small calculator"))
    drifted = escrow(home, "replay", run_id, "--reexecute", *url)
    assert "first drifting turn" in drifted.stdout, shown(drifted, ())
    escrow(home, "parity", run_id, "--model-url", fault_server.base_url, *url, check=False)
    escrow(home, "price", "set", "bedrock/us.amazon.nova-premier-v1:0-with-a-long-deployment-suffix",
           "--input", "1.5", "--output", "3")
    deep = tmp_path / ("a-folder-of-policies-with-a-long-name/" * 3)
    deep.mkdir(parents=True)
    (deep / "policy.toml").write_text("[tools]\nallowed = 7\n[limits]\nmax_turns = 'many'\n", encoding="utf-8")
    refused = escrow(home, "policy", "check", str(deep / "policy.toml"), check=False)
    assert refused.returncode != 0 and "error" in refused.stderr, shown(refused, ())
    escrow(home, "gc", "--older-than", "0d", "--dry-run", *url)
    collected = escrow(home, "gc", "--older-than", "0d", *url)
    assert collected.stdout.startswith("deleted 4 runs"), shown(collected, ())  # the run, its replays and fork


def test_ctrl_c_on_a_batch_says_so_within_80_columns(tmp_path: Path, fault_server: FaultServer,
                                                       sandbox_image: str) -> None:
    """The batch interrupt message (163 columns) and the lines before it."""
    fault_server.script([Fault.stall(120.0)])
    home = tmp_path / "home"
    driver = subprocess.Popen(
        [str(ESCROW), "batch", str(subset_task_file(tmp_path, ("calc-mean",))), "--model-url",
         fault_server.base_url, "--workers", "1", "--context-window", "8192", "--tokenizer", "cl100k_base",
         "--max-turns", "2"],
        env=cli_env(home, COLUMNS=str(WIDTH)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:  # Ctrl-C once the run's call is streaming (stalled after its first chunk)
        wait_for(lambda: any(not s.all_sent for s in fault_server.streams), "a call streaming", proc=driver)
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    done = subprocess.CompletedProcess(driver.args, driver.returncode, out, err)
    assert "interrupted" in err and "escrow batch --resume" in err, shown(done, ("batch",))
    fits(done, ("batch",))
