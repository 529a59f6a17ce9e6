"""`escrow report`, `escrow export` and `escrow price` through the CLI app, and
as real subprocesses for the no-traceback guarantee on bad input."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from store import Store
from tests.processes import run_escrow


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def escrow(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_escrow(home, *args, timeout=120)


def test_run_report_in_every_format(scripted, home: Path, tmp_path: Path) -> None:
    run_id = scripted.record(scripted.GROWING)
    table = invoke("report", run_id[:8])
    assert table.exit_code == 0, table.output
    flat = " ".join(table.output.split())  # its sentences are folded to the width
    assert "cost per turn" in flat and "re-sent" in flat and "N*S0 + delta*N(N-1)/2 = 5,200" in flat
    assert "S0 = 1000, the first call's prompt tokens" in flat
    as_json = json.loads(invoke("report", run_id, "--json").output)
    assert as_json["total"]["prompt_tokens"] == 5200 and as_json["comparison"]["ideal_cache_tokens"] == 1600
    assert [t["resent_tokens"] for t in as_json["turns"]] == [0, 1000, 1200, 1400]
    rows = list(csv.DictReader(io.StringIO(invoke("report", run_id, "--csv").output)))
    assert [r["turn"] for r in rows] == ["0", "1", "2", "3", "total"] and rows[-1]["cached_tokens"] == "2200"
    page = tmp_path / "r.html"
    assert invoke("report", run_id, "--html", str(page), "--json").exit_code == 0
    assert '<svg class="chart" id="tokens-per-turn"' in page.read_text()


def test_aggregate_report_and_price_edits(scripted, home: Path) -> None:
    scripted.record(scripted.GROWING)
    scripted.record(scripted.GROWING[:2], verdict="FAIL")
    result = invoke("price", "set", "gemma-3-270m", "--input", "1", "--output", "2", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["input_per_mtok"] == 1.0
    by_verdict = json.loads(invoke("report", "--by", "verdict", "--since", "1h", "--json").output)
    assert {g["verdict"]: g["runs"] for g in by_verdict["groups"]} == {"FAIL": 1, "PASS": 1}
    assert by_verdict["total"]["cost_usd"] > 0 and "+local." in by_verdict["price_version"]
    shown = json.loads(invoke("price", "show", "--json").output)
    assert shown["models"]["gemma-3-270m"]["input_per_mtok"] == 1.0 and shown["overridden"] == ["gemma-3-270m"]
    assert "cost by model" in invoke("report").output
    assert invoke("price", "unset", "gemma-3-270m").exit_code == 0
    assert json.loads(invoke("report", "--json").output)["total"]["cost_usd"] == 0.0


def test_export_verified_runs_only_unless_asked(scripted, home: Path, tmp_path: Path) -> None:
    passed = scripted.record(scripted.GROWING)
    failed = scripted.record(scripted.GROWING[:2], verdict="FAIL")
    out = tmp_path / "train.jsonl"
    assert invoke("export", "--all", "--output", str(out)).exit_code == 0
    assert [json.loads(line)["run_id"] for line in out.read_text().splitlines()] == [passed]
    both = invoke("export", "--all", "--include-unverified").output
    assert {json.loads(line)["run_id"] for line in both.splitlines() if line.startswith("{")} == {passed, failed}
    refused = invoke("export", failed[:8])
    # CliRunner calls the app directly; cli.main.main maps the error to its exit code.
    assert getattr(refused.exception, "exit_code", None) == 8 and "--include-unverified" in str(refused.exception)
    events = invoke("export", failed, "--format", "events-jsonl").output
    assert json.loads(events.splitlines()[0])["type"] == "run"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("report", "abc", "--by", "day"), 2),
        (("report", "--by", "week"), 2),
        (("report", "--since", "yesterday"), 2),
        (("report", "--json", "--csv"), 2),
        (("export",), 2),
        (("export", "--all", "--format", "parquet"), 2),
        (("price", "set", "m"), 2),
        (("price", "set", "m", "--input", "-1"), 2),
        (("price", "set", "m", "--input", "cheap"), 2),
    ],
)
def test_usage_errors(home: Path, args: tuple[str, ...], code: int) -> None:
    result = invoke(*args)
    assert getattr(result.exception, "exit_code", result.exit_code) == code, result.output


def test_bad_input_as_subprocess_never_shows_a_traceback(scripted, home: Path) -> None:
    empty_home = home.parent / "empty"
    empty_home.mkdir()
    Store.open(f"sqlite:///{empty_home / 'escrow.db'}").close()
    run_id = scripted.record(scripted.GROWING[:1])
    cases = [
        (empty_home, ("report",), 8, "no runs with recorded model calls"),
        (empty_home, ("export", "--all"), 8, "no runs recorded"),
        (home.parent / "nowhere", ("report", "abc"), 3, "no store at"),
        (home, ("report", "ffffffffffff"), 6, "no run matches"),
        (home, ("export", "ffffffffffff"), 6, "no run matches"),
        (home, ("report", "--since", "999d", "--until", "998d"), 8, "window"),
        (home, ("price", "set", "m", "--input", "-1"), 2, ">= 0"),
        (home, ("price", "set", "m", "--output", "lots"), 2, "Invalid value for '--output'"),
    ]
    for where, args, code, says in cases:
        done = escrow(where, *args)
        assert (done.returncode, says in done.stderr, "Traceback" in done.stderr + done.stdout) == (
            code,
            True,
            False,
        ), (args, done.stderr)
    bad_files = [
        ('[models."gemma-3-270m"]\ninput_per_mtok = -2\n', ">= 0"),
        ('[models."gemma-3-270m"]\ninput_per_mtok = "two"\n', "must be a number"),
        ('[models."gemma-3-270m"]\ninput_usd = 2\n', "unknown key"),
        ("models = [", "not valid TOML"),
    ]
    for text, says in bad_files:
        (home / "prices.toml").write_text(text)
        for args in (("report", run_id), ("price", "show")):
            done = escrow(home, *args)
            # Errors are folded to 80 columns, where the path's length puts the breaks.
            said = " ".join(done.stderr.split())
            assert (done.returncode, says in said, "Traceback" in done.stderr) == (2, True, False), (
                text,
                args,
                done.stderr,
            )
