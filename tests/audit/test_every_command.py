"""Issue 42: an audit of what a person reads, over every command ``escrow
--help`` lists (and each group's subcommands), walked from the app itself:
a new command fails here until it is given an invocation, so none is left
out by forgetting. Each runs as a real subprocess, piped, at COLUMNS=80,
against a store of the real imported trajectories (tests/interop/conftest.py
REAL_SAMPLES). The rules (README): no traceback; every human line within 80
columns (stdout and stderr; JSON is data and is only parsed); ``--json``
output that parses (JSON Lines for import); data on stdout, logs on stderr
(a --json stdout holds nothing else); an absent figure never shown as
"0 (absent)" or a count of 0 beside its absent source. Outputs that need a
run Escrow recorded itself (replay, a fork's patch, parity against a live
server, gc that deletes, Ctrl-C on a batch) are read beside it, in
tests/audit/test_widths.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from cli.main import app
from tests.interop.conftest import REAL_SAMPLES, real

ESCROW = Path(sys.executable).parent / "escrow"
REPO = Path(__file__).resolve().parents[2]
WIDTH = 80

# Per command path, the invocations to audit ({run}: an imported run with
# calls; {reasoner}: the DeepSeek-reasoner one; {dead}: a URL nothing listens
# on; {tmp}: a scratch folder). Commands that would act on this machine
# (build an image, remove containers) are audited by their --help.
INVOCATIONS: dict[tuple[str, ...], list[list[str]]] = {
    ("run",): [["run", "fix mean()", "--repo", "{tmp}", "--verify", "true", "--model-url", "{dead}"]],
    ("call",): [["call", "hi", "--model-url", "{dead}", "--model", "m", "--deadline", "2"],
                ["call", "hi", "--model-url", "{dead}", "--model", "m", "--deadline", "2", "--json"]],
    ("fault-server",): [["fault-server"], ["fault-server", "--script", "{tmp}/missing.json"]],
    ("runs",): [["runs"], ["runs", "--json"]],
    ("show",): [["show", "{run}"], ["show", "{reasoner}"], ["show", "{run}", "--json"], ["show", "{ambiguous}"]],
    ("verify",): [["verify", "--all"], ["verify", "{run}", "--json"]],
    ("migrate",): [["migrate"]],
    ("gc",): [["gc", "--older-than", "30d", "--dry-run"], ["gc", "--older-than", "30d", "--dry-run", "--json"]],
    ("report",): [["report"], ["report", "--by", "source"], ["report", "--by", "model", "--json"],
                  ["report", "{run}"], ["report", "{run}", "--json"], ["report", "--by", "day"]],
    ("export",): [["export", "--all", "--format", "atif", "-o", "{tmp}/all.atif.jsonl"],
                  ["export", "{run}", "--format", "events-jsonl", "-o", "{tmp}/events.jsonl"],
                  ["export", "--all", "--include-unverified", "-o", "{tmp}/chat.jsonl"]],
    ("import",): [["import", "{sample}"], ["import", "--json", "{sample}", "{sample2}"]],
    ("replay",): [["replay", "{run}"], ["replay", "{run}", "--json"]],
    ("parity",): [["parity", "{run}", "--model-url", "{dead}"]],
    ("view",): [["view", "--export", "{tmp}/bundle"]],
    ("batch",): [["batch", "list"], ["batch", "list", "--json"], ["batch", "status", "no-such-batch"],
                 ["batch", "{tmp}/no-such-tasks.jsonl", "--model-url", "{dead}"]],
    ("sandbox", "build"): [["sandbox", "build", "--help"]],
    ("sandbox", "doctor"): [["sandbox", "doctor", "--help"]],
    ("sandbox", "gc"): [["sandbox", "gc", "--help"]],
    ("policy", "check"): [["policy", "check", str(REPO / "policies" / "default.toml")],
                          ["policy", "check", "{tmp}/bad-policy.toml"]],
    ("policy", "show-default"): [["policy", "show-default"]],
    ("price", "show"): [["price", "show"], ["price", "show", "--json"]],
    ("price", "set"): [["price", "set", "audit-model", "--input", "1.5", "--output", "3"]],
    ("price", "unset"): [["price", "unset", "audit-model"]],
    ("tokens",): [["tokens", "{run}"], ["tokens", "{run}", "--json"]],
    ("score",): [["score", "{run}", "--teacher-url", "{dead}", "--teacher-model", "m", "--student-url", "{dead}"],
                 ["score", "{run}", "--teacher-url", "{dead}", "--teacher-model", "m", "--student-url", "{dead}",
                  "--json"]],
    ("verify-patch",): [["verify-patch", "{run}", "--flags-only"], ["verify-patch", "{run}", "--json"]],
}


def command_paths(group: Any, ctx: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if hasattr(command, "list_commands"):  # a group (typer's click or click's own)
            yield from command_paths(command, ctx, (*prefix, name))
        else:
            yield (*prefix, name)


def every_command() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    with root.make_context("escrow", [], resilient_parsing=True) as ctx:
        return list(command_paths(root, ctx))


def test_every_command_has_an_audited_invocation() -> None:
    listed = every_command()
    assert len(listed) > 15
    missing = [" ".join(path) for path in listed if path not in INVOCATIONS]
    assert not missing, f"give these commands an invocation in INVOCATIONS: {missing}"


@pytest.fixture(scope="module")
def audited_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("audit-home")
    env = {**os.environ, "ESCROW_HOME": str(home), "COLUMNS": str(WIDTH)}
    env.pop("ESCROW_DB_URL", None)
    done = subprocess.run([str(ESCROW), "import", "--json", *(str(real(s)) for s in REAL_SAMPLES)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    by_file = {Path(o["path"]).name: o["run_ids"] for o in outcomes}
    # A prefix of several runs' ids (imported ids are random: a fixed "1" was
    # sometimes one run's, whose tool output quotes a traceback).
    firsts = Counter(run_id[0] for o in outcomes for run_id in o["run_ids"])
    ambiguous, shared = firsts.most_common(1)[0]
    assert shared >= 2, firsts
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    scratch = tmp_path_factory.mktemp("audit-scratch")
    (scratch / "bad-policy.toml").write_text("[tools]\nallowed = 7\n", encoding="utf-8")
    places = {
        "run": by_file["swe-agent__test-repo-i1.traj"][0],
        "reasoner": by_file["deepseek_reasoner_dev__pvlib__pvlib-python-1606.traj.json"][0],
        "dead": dead, "tmp": str(scratch), "ambiguous": ambiguous,
        "sample": str(real(REAL_SAMPLES[0])), "sample2": str(real(REAL_SAMPLES[1])),
    }
    return home, places


AUDITED = [(path, n) for path, calls in INVOCATIONS.items() for n in range(len(calls))]


@pytest.mark.parametrize(("path", "n"), AUDITED, ids=[f"{' '.join(p)}-{n}" for p, n in AUDITED])
def test_what_a_person_reads(audited_home: tuple[Path, dict[str, str]], path: tuple[str, ...], n: int) -> None:
    home, places = audited_home
    argv = [arg.format(**places) for arg in INVOCATIONS[path][n]]
    env = {**os.environ, "ESCROW_HOME": str(home), "COLUMNS": str(WIDTH)}
    env.pop("ESCROW_DB_URL", None)
    done = subprocess.run([str(ESCROW), *argv], env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    shown = f"escrow {' '.join(argv)} (exit {done.returncode})\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    as_json = "--json" in argv
    # (A JSON document's strings are data: an imported task may quote a traceback.)
    assert "Traceback" not in done.stderr + ("" if as_json else done.stdout), shown
    if as_json and done.stdout.strip():
        lines = done.stdout.splitlines()
        try:
            json.loads(done.stdout)
        except ValueError:
            for line in lines:  # JSON Lines: each line a document
                json.loads(line)
    wide = [line for line in done.stderr.splitlines() + ([] if as_json else done.stdout.splitlines())
            if len(line) > WIDTH]
    assert not wide, f"{len(wide)} lines over {WIDTH} columns:\n" + "\n".join(wide) + "\n" + shown
    assert "0 (absent)" not in done.stdout + done.stderr, shown
