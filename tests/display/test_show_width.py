"""``escrow show RUN`` and ``--full`` as a person reads them (issue 27): at
80 and 120 columns no line is wider than the terminal (but a patch's diff
line, printed whole); under ``--full`` nothing is cut; events read as
``key: value`` lines, not JSON; an imported tool call reads as executed by
the source agent, not as a rejected or staged one; a time the source does
not give reads ``-``, never 0. Real imported runs of several formats, and a
native run recorded through the Recorder."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from cli.display.render import fold, model_block
from cli.display.steps import ModelStep
from cli.main import app
from orchestrator.canonical import sha256_hex
from orchestrator.contract import Message, ToolCall
from orchestrator.envelope import Envelope, Payload, Status, Timings, Usage
from orchestrator.terminal_text import printable
from orchestrator.trajectory import Trajectory
from store import Recorder, Store
from store.write import synthetic
from store.write.importer import import_file
from tests.display.hostile import squeezed
from tests.interop.conftest import real

IMPORTED = (
    "mini-swe-agent/deepseek_lite_dev__sqlfluff__sqlfluff-2419.traj.json",
    "swe-agent/6e44b9__sweagenttestrepo-1c2844.traj",
    "swe-agent/swe-agent__test-repo-i1.traj",
    "openhands/basic_interactions.json",
    "openhands-v1/cd94562403b9487ebdd4018e3f531dfd",
    "inspect/log_read_sample.eval",
    "atif/doku.terminus2.trajectory.json",
)
WIDTHS = (80, 120)
LONG_DIFF_LINE = "+x = '" + "a long diff line " * 8 + "'"
TASK = ("Fix the failing test in calc.py. " * 6 + "\n\nThe test:\n  " + "pytest -q tests/test_calc.py::" + "x" * 110)
COMMAND = "cat > calc.py <<'EOF'\n" + "\n".join(f"def f{n}(x):  # {'word ' * 20}" for n in range(3)) + "\nEOF"
OUTPUT = "\n".join([f"line {n} " + "out " * (n * 3) for n in range(30)] + ["y" * 150, "1 passed in 0.05s"])


def record_native(store: Store) -> str:
    """A run as Escrow records one: a long task, words, a committed bash call
    with a command of several lines and a long output, a rejected call, events
    with nested data and a patch with a line wider than any terminal."""
    recorder = Recorder(store)
    run_id = recorder.start_run(task=TASK, repo="/work/example", model="gemma-3-270m",
                                config={"max_turns": 20}, policy={"tools": ["bash"]})
    recorder.record_event(run_id, None, "engine", {"engine": "llama.cpp", "props": {"n_ctx": 8192, "build": "b1"}})
    calls = (ToolCall(id="c0", name="bash", arguments=json.dumps({"command": COMMAND})),
             ToolCall(id="c1", name="read_file", arguments=json.dumps({"path": "/etc/" + "p" * 90})))
    words = "I will rewrite calc.py so that each function returns the right value, then run the tests. " * 4
    envelope = Envelope(status=Status.COMPLETED, finish_reason="tool_calls", http_status=200,
                        payload=Payload(text=words, tool_calls=calls),
                        usage=Usage(prompt_tokens=900, completion_tokens=80, prompt_source="server",
                                    completion_source="server"),
                        timings=Timings(ttft_s=0.05, decode_s=0.3, total_s=0.36))
    with recorder.turn(run_id, 0) as tx:
        call_id = tx.request(synthetic.request_for(0, [Message(role="user", content=TASK)]))
        tx.envelope(call_id, envelope, cost_usd=0.0012)
        ran = tx.candidate(call_id, 0, calls[0])
        tx.transition(ran, None, "STAGED", "released from model escrow")
        tx.transition(ran, "STAGED", "VALIDATING", "parse, schema, policy")
        tx.transition(ran, "VALIDATING", "COMMITTED", "policy", layer="policy")
        tx.tool_execution(ran, tool="bash", arguments_json=calls[0].arguments, decision="allow", rule="tools.bash",
                          reason="granted", exit_code=0, stdout=OUTPUT, stderr="", duration_s=0.2,
                          observation=OUTPUT, ok=True)
        denied = tx.candidate(call_id, 1, calls[1])
        tx.transition(denied, None, "STAGED", "released from model escrow")
        tx.transition(denied, "STAGED", "REJECTED", "outside the workspace: " + "/etc/" + "p" * 90, layer="policy")
        tx.event("route", {"status": "COMPLETED", "action": "release", "why": {"calls": 2, "notes": ["a", "b"]}})
        tx.commit([Message(role="assistant", content=words, tool_calls=calls)])
    diff = f"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x = 1\n{LONG_DIFF_LINE}\n"
    recorder.record_event(run_id, None, "patch", {"sha256": sha256_hex(diff.encode()), "files": ["calc.py"],
                                                   "text": diff, "skipped": [], "flagged": [], "verified": True})
    recorder.finish_run(run_id, "PASS", "the verifier passed", turn=1)
    return run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[str, dict[str, Trajectory], str]:
    """The store's URL, each run's trajectory by run id, and the native run's id."""
    path = tmp_path_factory.mktemp("show-width") / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        ids = [import_file(store, real(relative)).run_ids[0] for relative in IMPORTED]
        native = record_native(store)
        trajectories = {run_id: store.trajectory(run_id) for run_id in [*ids, native]}
    return f"sqlite:///{path}", trajectories, native


def show(url: str, run_id: str, width: int, *, full: bool) -> list[str]:
    result = CliRunner().invoke(app, ["show", run_id, *(["--full"] if full else []), "--db", url],
                                env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def diff_lines(lines: list[str]) -> set[int]:
    """The lines of the patch's diff, the one text printed whole."""
    start = next((n for n, line in enumerate(lines) if line.startswith("patch sha256 ")), len(lines))
    return set(range(start + 1, len(lines)))


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("width", WIDTHS)
def test_no_line_is_wider_than_the_terminal(runs, width, full):
    url, trajectories, _ = runs
    for run_id in trajectories:
        lines = show(url, run_id, width, full=full)
        whole = diff_lines(lines)
        wide = [line for n, line in enumerate(lines) if len(line) > width and n not in whole]
        assert not wide, f"{run_id}: {len(wide)} lines over {width}: {wide[:3]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_full_shows_every_text_whole(runs, width):
    """The task, the model's words, each call's arguments and each output:
    every character there, folded but never cut."""
    url, trajectories, _ = runs
    for run_id, trajectory in trajectories.items():
        shown = squeezed("\n".join(show(url, run_id, width, full=True)))
        assert squeezed(printable(trajectory.run.task).expandtabs()) in shown, run_id
        for record in trajectory.turns:
            for run in record.tool_executions:
                assert squeezed(printable(run.observation).expandtabs()) in shown, (run_id, run.observation[:60])
            for call in record.calls:
                text = call.response.envelope().payload.text if call.response else ""
                assert squeezed(printable(text).expandtabs()) in shown, (run_id, text[:60])
            for cand in record.candidates:
                proposed = json.loads(cand.tool_call_json)
                arguments = proposed.get("arguments") or json.dumps({"action": proposed.get("text_action") or ""})
                try:
                    values = json.loads(arguments).values()
                except (ValueError, AttributeError):
                    values = [arguments]
                for value in values:
                    if isinstance(value, str):
                        assert squeezed(printable(value).expandtabs()) in shown, (run_id, value[:60])


def test_without_full_what_is_collapsed_says_how_much_is_hidden(runs):
    url, _, native = runs
    lines = show(url, native, 80, full=False)
    assert "    │ … 27 more lines" in lines and "    │ 1 passed in 0.05s" in lines
    assert not any(line.endswith("…") for line in lines if "│" in line)  # no output line cut at the edge
    summary = "\n".join(lines[lines.index(next(line for line in lines if line.startswith("  ▸ bash"))):][:4])
    assert re.search(r"… \([\d,]+ more characters, --full shows them\)", summary), summary  # the call's cut says so


def test_imported_calls_read_as_executed_by_the_source(runs):
    url, trajectories, native = runs
    for run_id in trajectories:
        if run_id == native:
            continue
        for full in (False, True):
            lines = show(url, run_id, 80, full=full)
            calls = [line for line in lines if line.startswith("  · ")]
            assert not any(line.startswith("  ✗ ") for line in lines), run_id
            assert not any(re.search(r"\bstaged\b", line) for line in lines if not line.startswith("    │")), run_id
            assert len(calls) == sum(len(r.candidates) for r in trajectories[run_id].turns), run_id
    lines = show(url, native, 80, full=False)
    assert any(line.startswith("  ▸ bash") for line in lines)
    assert any(line.startswith("  ✗ read_file") for line in lines)


def test_times_the_source_does_not_give_read_absent(runs):
    """mini-swe-agent records no call's time: each model heading reads
    ``time -``, each call's internals ``total -``, never 0.0s or 0.000s."""
    url, trajectories, _ = runs
    run_id = next(r for r, t in trajectories.items() if "sqlfluff" in t.run.repo)
    lines = show(url, run_id, 120, full=True)
    headings = [line for line in lines if re.match(r"turn \d+ COMPLETED", line)]
    assert headings and all(line.endswith("time -") for line in headings)
    text = "\n".join(lines)
    assert "0.0s" not in text and "0.000s" not in text and "total -" in text
    assert "exit 0, time -," in text  # the tool calls' times too


@pytest.mark.parametrize("full", [False, True])
def test_events_read_as_key_value_lines(runs, full):
    url, trajectories, native = runs
    for run_id, trajectory in trajectories.items():
        lines = show(url, run_id, 80, full=full)
        events = [*trajectory.run_events, *(e for r in trajectory.turns for e in r.events if full)]
        for event in events:
            if event.kind == "genesis":
                continue
            # The engine probe's event is one header line unless --full (issue 42).
            label = "engine:" if event.kind == "engine" and not full else f"event {event.kind}:"
            assert any(line.strip().startswith(label) for line in lines), (run_id, event.kind)
        assert not any(re.search(r"event \w+: [{\[]", line) for line in lines), run_id
    lines = show(url, native, 80, full=full)
    if full:
        assert "  event engine:" in lines and "      n_ctx: 8,192" in lines
    else:
        assert any(line.startswith("  engine:  ") for line in lines) and "  event engine:" not in lines
    assert not full or ("    why:" in lines and "      notes: a, b" in lines)


def test_the_patch_diff_line_is_printed_whole(runs):
    url, _, native = runs
    assert LONG_DIFF_LINE in show(url, native, 80, full=False)


def test_fold_breaks_at_words_and_only_a_word_wider_than_the_line():
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    lines = [line.plain for line in fold(Text(words), 20, "  ")]
    assert all(len(line) <= 20 for line in lines) and lines[0].startswith("  alpha")
    assert all(line.startswith("    ") for line in lines[1:])  # continuations indented
    assert " ".join(" ".join(lines).split()) == words  # every word whole, none broken
    long = "x" * 50
    lines = [line.plain for line in fold(Text(f"path: {long} end"), 20)]
    assert all(len(line) <= 20 for line in lines) and "".join(lines).replace(" ", "") == f"path:{long}end"
    assert lines[0].startswith("path: x")  # the long word starts on the line that has room, not one further down


def test_full_gives_a_long_refusal_whole_in_the_heading():
    refusal = "I cannot help with that, " + "because of a long list of reasons " * 10 + "END."
    step = ModelStep(turn=2, status="REFUSED", cause=refusal, refusal=refusal)
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(model_block(step, full=True))
    assert "END." in out.getvalue() and all(len(line) <= 80 for line in out.getvalue().splitlines())
