"""An imported run's report gives its source's own tokens and dollars: per
call where the source has them, else its run-level totals (marked so);
Escrow's price table only with --reprice. The expected figures are summed
here from each real sample's raw JSON, not from the parsers."""

from __future__ import annotations

import json
import zipfile
from typing import Any

import pytest

from orchestrator.composition.launch.reports import report_run, report_runs
from policies.price_table import PriceTable
from policies.pricing import Price
from store.write.importer import import_file
from tests.interop.conftest import REAL_SAMPLES, real


def prices(table: dict[str, Price] | None = None) -> PriceTable:
    return PriceTable(version="test", sources=(), prices=table or {})


def per_call_or_run(calls: list[Any], run_level: Any) -> Any:
    """The rule: the per-call sum where any call gives the figure, else the run-level one."""
    given = [c for c in calls if c is not None]
    return sum(given) if given else run_level


def expected(relative: str) -> list[dict[str, Any]]:
    """The source's own totals, one dict per trajectory: prompt, completion, cost (None: absent)."""
    path = real(relative)
    fmt = relative.split("/")[0]
    if fmt == "inspect":
        out = []
        with zipfile.ZipFile(path) as z:
            for name in sorted(n for n in z.namelist() if n.startswith("samples/")):
                sample = json.loads(z.read(name))
                usages = [e["output"].get("usage") or {} for e in sample["events"] if e["event"] == "model"]
                prompt = [u["input_tokens"] + u.get("input_tokens_cache_read", 0) + u.get("input_tokens_cache_write", 0)
                          if "input_tokens" in u else None for u in usages]
                run = list((sample.get("model_usage") or {}).values())
                out.append({
                    "prompt": per_call_or_run(prompt, sum(u["input_tokens"] + u.get("input_tokens_cache_read", 0)
                                                          for u in run) if run else None),
                    "completion": per_call_or_run([u.get("output_tokens") for u in usages],
                                                  sum(u["output_tokens"] for u in run) if run else None),
                    "cost": per_call_or_run([u.get("total_cost") for u in usages],
                                            next((u["total_cost"] for u in run if "total_cost" in u), None)),
                })
        return out
    if fmt == "openhands-v1":
        state = json.loads((path / "base_state.json").read_text())
        metrics = list(state["stats"]["usage_to_metrics"].values())
        return [{"prompt": sum(t["prompt_tokens"] for m in metrics for t in m["token_usages"]),
                 "completion": sum(t["completion_tokens"] for m in metrics for t in m["token_usages"]),
                 "cost": sum(c["cost"] for m in metrics for c in m["costs"])}]
    raw = json.loads(path.read_bytes())
    if fmt == "atif":
        agent = [s.get("metrics") or {} for s in raw["steps"] if s["source"] == "agent"]
        final = raw.get("final_metrics") or {}
        return [{"prompt": per_call_or_run([m.get("prompt_tokens") for m in agent], final.get("total_prompt_tokens")),
                 "completion": per_call_or_run([m.get("completion_tokens") for m in agent],
                                               final.get("total_completion_tokens")),
                 "cost": per_call_or_run([m.get("cost_usd") for m in agent], final.get("total_cost_usd"))}]
    if fmt == "swe-agent":
        stats = raw["info"]["model_stats"]
        return [{"prompt": stats["tokens_sent"], "completion": stats["tokens_received"],
                 "cost": stats["instance_cost"]}]
    if fmt == "mini-swe-agent":
        messages = raw if isinstance(raw, list) else raw["messages"]
        extra = [m.get("extra") or {} for m in messages if m["role"] == "assistant"]
        usage = [(e.get("response") or {}).get("usage") or {} for e in extra]
        stats = {} if isinstance(raw, list) else raw["info"].get("model_stats") or {}
        return [{"prompt": per_call_or_run([u.get("prompt_tokens") for u in usage], None) or 0,
                 "completion": per_call_or_run([u.get("completion_tokens") for u in usage], None) or 0,
                 "cost": per_call_or_run([e.get("cost") for e in extra], stats.get("instance_cost"))}]
    assert fmt == "openhands"
    seen: dict[str, Any] = {}
    for event in raw:
        response = (event.get("tool_call_metadata") or {}).get("model_response")
        if response:
            seen[response["id"]] = response["usage"]
    metrics = [e["llm_metrics"] for e in raw if e.get("llm_metrics")]
    return [{"prompt": sum(u["prompt_tokens"] for u in seen.values()),
             "completion": sum(u["completion_tokens"] for u in seen.values()),
             "cost": metrics[-1].get("accumulated_cost") if metrics else None}]


@pytest.mark.parametrize("relative", REAL_SAMPLES)
def test_each_report_gives_the_source_s_own_tokens_and_dollars(store, relative):
    outcome = import_file(store, real(relative))
    for run_id, want in zip(outcome.run_ids, expected(relative), strict=True):
        got = report_run(store, run_id, prices())
        assert (got.total.prompt_tokens, got.total.completion_tokens) == (want["prompt"], want["completion"])
        if want["cost"] is None:
            assert got.cost_basis == "absent" and got.total.cost.total_usd == 0.0
        else:
            assert got.cost_basis.startswith("source") and got.total.cost.total_usd == pytest.approx(want["cost"])
        assert not any("no price" in w for w in got.warnings), got.warnings


def test_swe_agent_run_level_totals_count_and_are_marked(store):
    path = real("swe-agent/swe-agent__test-repo-i1.traj")
    stats = json.loads(path.read_bytes())["info"]["model_stats"]
    run_id = import_file(store, path).run_ids[0]
    got = report_run(store, run_id, prices())
    assert got.cost_basis == "source run-level"
    assert got.run_level_figures == {
        "prompt_tokens": stats["tokens_sent"], "completion_tokens": stats["tokens_received"],
        "cost_usd": stats["instance_cost"]}
    assert got.comparison is None, "run-level totals are no calls: the per-call cache comparison leaves them out"
    groups = {g.key: g for g in report_runs(store, by="source", since=None, until=None, prices=prices()).groups}
    assert groups["swe-agent"].prompt_tokens == stats["tokens_sent"]
    assert groups["swe-agent"].cost.total_usd == pytest.approx(stats["instance_cost"])


def test_twins_report_their_own_totals_and_show_where_they_differ(store):
    """mini-swe-agent gives no per-call cost: its run-level instance_cost counts. Its
    ATIF twin gives per-step costs that add up to more than its own final_metrics:
    the per-call sum counts, and the report shows both."""
    mini = real("mini-swe-agent/charset_normalizer.mini-swe-agent.trajectory.json")
    atif = real("atif/charset_normalizer.trajectory.json")
    a = report_run(store, import_file(store, mini).run_ids[0], prices())
    b = report_run(store, import_file(store, atif).run_ids[0], prices())
    final = json.loads(atif.read_bytes())["final_metrics"]
    instance_cost = json.loads(mini.read_bytes())["info"]["model_stats"]["instance_cost"]
    assert a.total.cost.total_usd == pytest.approx(instance_cost)
    assert a.total.cost.total_usd == pytest.approx(final["total_cost_usd"])
    assert b.source_totals is not None
    assert b.source_totals["run_level"]["cost_usd"] == final["total_cost_usd"]
    assert b.source_totals["per_call"]["cost_usd"] == pytest.approx(b.total.cost.total_usd)
    assert (a.total.prompt_tokens, a.total.completion_tokens) == (b.total.prompt_tokens, b.total.completion_tokens)


def test_reprice_uses_the_price_table_and_aggregates_agree(store):
    path = real("atif/doku.terminus2.trajectory.json")
    run_id = import_file(store, path).run_ids[0]
    model = store.run(run_id).request_model
    table = prices({model: Price(model=model, input_per_mtok=1000.0, output_per_mtok=1000.0)})
    own = report_run(store, run_id, table)
    again = report_run(store, run_id, table, reprice=True)
    tokens = own.total.prompt_tokens + own.total.completion_tokens
    assert again.cost_basis == "price table" and again.total.cost.total_usd == pytest.approx(tokens / 1000)
    assert own.total.cost.total_usd != pytest.approx(again.total.cost.total_usd)
    for reprice, single in ((False, own), (True, again)):
        many = report_runs(store, by="model", since=None, until=None, prices=table, reprice=reprice)
        assert [g.key for g in many.groups] == [model]
        assert many.groups[0].cost.total_usd == pytest.approx(single.total.cost.total_usd)
    unpriced = report_runs(store, by="model", since=None, until=None, prices=prices())
    assert not unpriced.warnings, "an imported run carrying its own cost needs no price"


def test_since_picks_by_the_source_s_times_not_the_import_s(store):
    run_id = import_file(store, real("inspect/custom.eval")).run_ids[0]
    started = store.run(run_id).created_at
    assert started == pytest.approx(1730831557.0)  # header started_at 2024-11-05T13:32:37-05:00
    assert not report_runs(store, by="model", since=started + 1, until=None, prices=prices()).groups
    assert report_runs(store, by="model", since=started - 1, until=None, prices=prices()).groups


def test_cli_report_json_marks_the_source_s_figures(tmp_path, cli_env):
    from typer.testing import CliRunner

    from cli.main import app

    runner = CliRunner()
    done = runner.invoke(app, ["import", "--json", str(real("swe-agent/swe-agent__test-repo-i1.traj"))])
    run_id = json.loads(done.stdout)["run_ids"][0]
    report = runner.invoke(app, ["report", run_id, "--json"])
    assert report.exit_code == 0, report.output
    got = json.loads(report.stdout)
    assert got["source"] == "swe-agent" and got["cost_basis"] == "source run-level"
    assert got["total"]["cost_usd"] == pytest.approx(0.53839) and got["total"]["source_usd"] == pytest.approx(0.53839)
    text = runner.invoke(app, ["report", run_id]).stdout
    assert "source's own figures" in text and "no price" not in text



def test_runs_lists_the_run_level_figures_on_both_readers(store, tmp_path):
    # The store fixture's file (tests/interop/conftest.py).
    """`escrow runs` (its light sqlite3 reader and Store.runs alike) counts
    SWE-agent's run-level tokens and dollars, where no call gives any."""
    from store.read.run_list import read_run_lines

    path = real("swe-agent/swe-agent__test-repo-i1.traj")
    stats = json.loads(path.read_bytes())["info"]["model_stats"]
    run_id = import_file(store, path).run_ids[0]
    light = read_run_lines(tmp_path / "escrow.db")
    assert light is not None
    full = {s.run.id: s.totals for s in store.runs()}[run_id]
    [line] = [line for line in light if line.run["id"] == run_id]
    for totals in (line.totals, full.model_dump()):
        assert (totals["input_tokens"], totals["output_tokens"]) == (stats["tokens_sent"], stats["tokens_received"])
        assert totals["cost_usd"] == pytest.approx(stats["instance_cost"])


def test_per_turn_figures_the_source_never_gave_are_absent_not_zero(tmp_path, cli_env):
    """A SWE-agent run whose calls carry no figures (its totals are run-level)
    and a mini-swe-agent run with none at all: each turn's tokens and dollars
    are null in JSON and "-" in the table, never 0; the total carries the
    run-level figures and leaves absent what the source lacks."""
    from typer.testing import CliRunner

    from cli.main import app

    runner = CliRunner()
    ran = {}
    for relative in ("swe-agent/swe-agent__test-repo-i1.traj", "mini-swe-agent/local.traj.json"):
        done = runner.invoke(app, ["import", "--json", str(real(relative))])
        ran[relative.split("/")[0]] = json.loads(done.stdout)["run_ids"][0]
    figures = ("prompt_tokens", "cached_tokens", "prefilled_tokens", "completion_tokens", "cost_usd", "source_usd",
               "cache_hit_ratio")
    stats = json.loads(real("swe-agent/swe-agent__test-repo-i1.traj").read_bytes())["info"]["model_stats"]
    for source, run_id in ran.items():
        got = json.loads(runner.invoke(app, ["report", run_id, "--json"]).stdout)
        assert got["turns"] and all(turn[name] is None for turn in got["turns"] for name in figures), source
        total = got["total"]
        if source == "swe-agent":
            assert (total["prompt_tokens"], total["completion_tokens"]) == (stats["tokens_sent"],
                                                                            stats["tokens_received"])
            assert total["cost_usd"] == pytest.approx(stats["instance_cost"]) and total["cached_tokens"] is None
        else:
            assert all(total[name] is None for name in figures), total
        text = runner.invoke(app, ["report", run_id], env={"COLUMNS": "120"}).stdout
        head = next(line for line in text.splitlines() if line.lstrip().startswith("turn "))
        row = next(line for line in text.splitlines() if line.split()[:1] == ["1"])
        ends = {name: head.index(name) + len(name) for name in ("prompt", "cached", "output", "$")}
        assert [row[:end].split()[-1] for end in ends.values()] == ["-"] * 4, text
        assert "total absent" in text if source == "mini-swe-agent" else "total $" in text
