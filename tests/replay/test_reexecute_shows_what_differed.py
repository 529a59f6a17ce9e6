"""Issue 42, group 14: ``replay --reexecute`` showed each drift as two
output hashes (only the first real drift got its diff). Each drift now
shows the lines that differ; the hashes stay in --json."""

from __future__ import annotations

from cli.replay_cmd import DRIFT_DIFF_LINES, render
from orchestrator.replay import ReplayReport, ToolDrift, TurnCheck

BEFORE, AFTER = "a" * 64, "b" * 64


def drift(turn: int, diff: str, kind: str = "output", exits: tuple[int, int] = (0, 0)) -> ToolDrift:
    return ToolDrift(turn=turn, candidate_index=0, tool="run_tests", recorded_exit_code=exits[0],
                     replayed_exit_code=exits[1], recorded_output_sha256=BEFORE, replayed_output_sha256=AFTER,
                     diff=diff, kind=kind)  # type: ignore[arg-type]


def test_every_drift_shows_its_differing_lines_not_hashes():
    long = "".join(f"-old {n}\n+new {n}\n" for n in range(20))
    report = ReplayReport(
        run_id="r1", mode="reexecute", replay_run_id=None, identical=False,
        turns=(TurnCheck(turn=0, recorded_sha256=BEFORE, replayed_sha256=BEFORE),),
        drifts=(drift(1, "-A tiny calculator\n+A small calculator\n"),
                drift(2, "-2 passed\n+1 failed, 1 passed\n", exits=(0, 1)),
                drift(3, "-took 0.51s\n+took 0.73s\n", kind="noise"),
                drift(4, long)),
        verdict="FAILED", recorded_verdict="PASS")
    text = render(report, width=80)
    assert BEFORE[:12] not in text and AFTER[:12] not in text
    shown = ("+A small calculator", "+1 failed, 1 passed", "+took 0.73s", "-old 0", f"-old {DRIFT_DIFF_LINES // 2 - 1}")
    for line in shown:
        assert line in text.splitlines(), line
    assert "exit 0 -> 1" in text and f"… {40 - DRIFT_DIFF_LINES} more line(s)" in text
    assert f"-old {DRIFT_DIFF_LINES // 2}" not in text  # cut, and said to be
