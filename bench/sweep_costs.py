"""Cost sweep (issue 43's closing figures): real runs of examples/calculator
(the scripted fault server, the Docker sandbox) with retried calls, calls
without usage, cached counts (one above its prompt: clamped) and GPU prices,
all in one store. Every place that shows dollars is compared with the cost
recomputed by raw SQL from the stored columns (docs' formula: uncached input,
cached and output tokens at their rates, GPU seconds = the summed attempt
durations, else total_s, at gpu_per_hour; the cached count clamped to the
prompt; an absent count is 0):

  per call:  show --json's call cost, the stored model_responses.cost_usd
  per run:   the loop's tally (run --json's), runs --json, show --json (sum),
             report RUN --json, the viewer's run page, ATIF, OTel
  aggregate: report --json's total, report --by model / --by day /
             --since 30d --json (groups summed), runs --json summed

Usage: PYTHONPATH=. .venv/bin/python bench/sweep_costs.py [--rounds 2] [--runtime runc|runsc]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from cli.view.pages import run_shown
from orchestrator.adapters.fault_server import Fault, FaultServer, Reply, Scenario
from orchestrator.settings import Settings
from policies.price_table import set_price
from store import Store
from tests.conftest import SANDBOX_IMAGE
from tests.e2e.conftest import EXAMPLE
from tests.e2e.test_one_cost import cli_json
from tests.e2e.test_run_faults import EDIT, SUBMIT, TEST, run, tool

TOLERANCE = 1e-9
MODEL = "gemma-3-270m"
PRICE = {"input_per_mtok": 1000.0, "cached_input_per_mtok": 100.0, "output_per_mtok": 2000.0,
         "gpu_per_hour": 3600.0}
READ = tool("read_file", path="calc.py")
CLAMPED = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
           "prompt_tokens_details": {"cached_tokens": 150}}

# What each run's model says: retries with backoff, cached counts, a run
# ending on calls without usage, a clamped cached count, a plain fix.
SCRIPTS: dict[str, Callable[[], list[Scenario]]] = {
    "retried, cached": lambda: [Fault.http(503, retry_after=0.3), READ.model_copy(update={"cached_tokens": 7}),
                                EDIT, TEST, SUBMIT],
    "ends without usage": lambda: [READ, *[Fault.http(503, retry_after=0.1)] * 3],
    "clamped cached count": lambda: [READ.model_copy(update={"usage": CLAMPED}), EDIT, TEST, SUBMIT],
    "retried, no tools": lambda: [Fault.http(503, retry_after=0.2), Reply(text="no tools", cached_tokens=3)],
    "plain fix": lambda: [EDIT, TEST, SUBMIT],
}

CALLS_SQL = """
SELECT r.call_id, r."gen_ai.usage.input_tokens", r."gen_ai.usage.cache_read.input_tokens",
       r."gen_ai.usage.output_tokens", r.total_s, r.cost_usd,
       (SELECT count(*) FROM call_attempts a WHERE a.call_id = r.call_id),
       (SELECT sum(a.duration_s) FROM call_attempts a WHERE a.call_id = r.call_id)
FROM model_responses r WHERE r.run_id = ?
"""


def sql_costs(db: Path, run_id: str) -> dict[str, tuple[float, float | None]]:
    """call id -> (the cost recomputed from the stored columns, the stored cost_usd)."""
    out = {}
    with closing(sqlite3.connect(db)) as conn:
        for call_id, prompt, cached, completion, total_s, stored, n_attempts, durations in conn.execute(
                CALLS_SQL, (run_id,)):
            prompt, completion = prompt or 0, completion or 0
            cached = min(cached or 0, prompt)
            gpu_s = durations if n_attempts else total_s
            dollars = ((prompt - cached) * PRICE["input_per_mtok"] + cached * PRICE["cached_input_per_mtok"]
                       + completion * PRICE["output_per_mtok"]) / 1e6 + gpu_s * PRICE["gpu_per_hour"] / 3600
            out[call_id] = (dollars, stored)
    return out


def otel_cost(env: dict[str, str], run_id: str) -> float:
    result = CliRunner().invoke(app, ["export", run_id, "--format", "otel"], env=env)
    assert result.exit_code == 0, result.output
    spans = [s for line in result.stdout.splitlines() if line.strip()
             for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    return float(sum(a["value"]["doubleValue"] for s in spans for a in s["attributes"]
                     if a["key"] == "escrow.cost_usd"))


def compare(where: str, shown: object, truth: float, mismatches: list[str]) -> None:
    if not isinstance(shown, (int, float)) or abs(float(shown) - truth) > TOLERANCE:
        mismatches.append(f"{where}: shown {shown!r}, raw SQL {truth!r}")


def group_sum(report: object) -> float:
    assert isinstance(report, dict)
    return float(sum(g["cost_usd"] for g in report["groups"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="times each of the five scripts is run")
    parser.add_argument("--runtime", default="runc", choices=("runc", "runsc"))
    args = parser.parse_args()
    started = time.monotonic()
    mismatches: list[str] = []
    places = 0
    tallies: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sweep-costs-") as where, FaultServer() as server:
        tmp = Path(where)
        settings = Settings(home=tmp / "home", model_url=server.base_url, sandbox_image=SANDBOX_IMAGE,
                            sandbox_runtime=args.runtime, context_window=8192, tokenizer="cl100k_base",
                            max_output_tokens=512, deadline_s=30.0)
        set_price(settings.home, MODEL, PRICE)
        env = {"ESCROW_HOME": str(settings.home)}
        db = settings.home / "escrow.db"
        calls = 0
        for round_ in range(args.rounds):
            for name, script in SCRIPTS.items():
                repo = tmp / f"repo-{round_}-{len(tallies)}"
                shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__",
                                                                                  ".pytest_cache"))
                server.reset()
                server.script(script())
                outcome = run(settings, repo)
                tallies[outcome.run_id] = outcome.result.cost_usd
                print(f"{name}: run {outcome.run_id[:12]} {outcome.result.verdict.value} "
                      f"${outcome.result.cost_usd:.6f}", flush=True)
        runs = cli_json(env, "runs", "--json")
        assert isinstance(runs, list)
        listed = {r["id"]: r for r in runs}
        truths: dict[str, float] = {}
        with Store.open(settings.store_url, readonly=True, create=False) as store:
            for run_id, tally in tallies.items():
                per_call = sql_costs(db, run_id)
                calls += len(per_call)
                truth = sum(dollars for dollars, _ in per_call.values())
                truths[run_id] = truth
                shown = cli_json(env, "show", run_id, "--json")
                assert isinstance(shown, dict)
                for turn in shown["turns"]:
                    for call in turn["calls"]:
                        if call["response"]:
                            dollars, stored = per_call[call["id"]]
                            compare(f"show call {call['id'][:8]}", call["response"]["cost_usd"], dollars, mismatches)
                            compare(f"stored cost_usd {call['id'][:8]}", stored, dollars, mismatches)
                            places += 2
                report = cli_json(env, "report", run_id, "--json")
                atif = cli_json(env, "export", run_id, "--format", "atif")
                assert isinstance(report, dict) and isinstance(atif, dict)
                figures = {
                    "run --json (the loop's tally)": tally,
                    "runs --json": listed[run_id]["totals"]["cost_usd"],
                    "show --json (calls summed)": sum(c["response"]["cost_usd"] for t in shown["turns"]
                                                      for c in t["calls"] if c["response"]),
                    "report RUN": report["total"]["cost_usd"],
                    "viewer run page": run_shown(store.trajectory(run_id)).cost_usd,
                    "ATIF": atif["final_metrics"]["total_cost_usd"],
                    "OTel": otel_cost(env, run_id),
                }
                for place, figure in figures.items():
                    compare(f"{place} {run_id[:8]}", figure, truth, mismatches)
                places += len(figures)
        everything = sum(truths.values())
        aggregates = {
            "report --json total": cli_json(env, "report", "--json")["total"]["cost_usd"],
            "report --by model groups": group_sum(cli_json(env, "report", "--by", "model", "--json")),
            "report --by day groups": group_sum(cli_json(env, "report", "--by", "day", "--json")),
            "report --since 30d total": cli_json(env, "report", "--since", "30d", "--json")[
                "total"]["cost_usd"],
            "runs --json summed": sum(r["totals"]["cost_usd"] for r in listed.values()),
        }
        for place, figure in aggregates.items():
            compare(place, figure, everything, mismatches)
        places += len(aggregates)
    print(json.dumps({
        "runs": len(tallies), "calls": calls, "places compared": places, "mismatches": len(mismatches),
        "mismatched": mismatches[:40], "dollars (raw SQL, all runs)": round(everything, 9),
        "seconds": round(time.monotonic() - started),
    }, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "80")
    main()
