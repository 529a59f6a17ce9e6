"""What a person sees of ``escrow run``: the live display read from a real
tmux pane at 80 and 120 columns, the plain lines off a terminal, ``--quiet``,
``escrow show``, and hostile model and tool content that must reach no
terminal raw (through the live display, the diff, ``show`` and errors)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from cli.display.live import PLAIN_HANG
from orchestrator.adapters.fault_server import Fault, FaultServer, Reply, ScriptedToolCall
from orchestrator.terminal_text import printable
from sandbox.hardening import LABEL_RUN
from store import Store
from tests.container_processes import commands_in
from tests.display.hostile import PAYLOADS, squeezed
from tests.display.test_terminal_text import assert_safe
from tests.e2e.terminal import ESCROW, run_args, run_in_pty

pytestmark = [pytest.mark.docker]

WORDS = "I'll look at calc.py first to see how mean() is computed."
THOUGHT = "The mean looks off by one."


def tool(name: str, **args: object) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=json.dumps(args))


def story() -> list[Reply]:
    """Read, a denied read, an answer cut off at the output limit, the fix, submit."""
    return [
        Reply(reasoning=THOUGHT, text=WORDS, tool_calls=(tool("read_file", path="calc.py"),), tokens_per_s=40),
        Reply(
            text="Let me check the repository settings as well.", tool_calls=(tool("read_file", path=".git/config"),)
        ),
        Fault.truncated("Now I will rewrite the whole module from scratch, starting with"),
        Reply(
            text="mean() divides by len+1; fixing the denominator.",
            tool_calls=(tool("edit_file", path="calc.py", old="(len(values) + 1)", new="len(values)"),),
        ),
        Reply(text="Running the verifier.", tool_calls=(tool("submit", summary="fixed mean"),)),
    ]


@pytest.mark.parametrize("width", [80, 120])
def test_live_display_in_tmux_shows_the_work_turn_by_turn(
    width, tmp_path, repo, fault: FaultServer, sandbox_image, tmux
):
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core]\n")
    fault.script(story())
    pane = tmux(width)
    pane.start(run_args(repo, fault.base_url), {"ESCROW_HOME": str(tmp_path / "home")})
    screen = pane.wait_for("EXIT=")

    assert "EXIT=0" in screen and "Traceback" not in screen
    assert WORDS in screen and f"~ {THOUGHT}" in screen  # the assistant's words and its reasoning
    assert "read_file calc.py" in screen and "def add(a: float, b: float)" in screen  # the call and its result
    lines = screen.splitlines()
    at = next(i for i, line in enumerate(lines) if "read_file calc.py" in line)
    read_call = " ".join(lines[at:at + 2])  # the call, then its result and escrow path on the next line
    assert "exit 0" in read_call and "committed, allow by tools.allowed paths.read[**]" in read_call
    denied = next(line for line in screen.splitlines() if "read_file .git/config" in line)
    assert "rejected at policy" in denied and "deny by paths.deny[.git/**]" in denied  # the rule
    truncated = next(line for line in screen.splitlines() if "TRUNCATED" in line)
    assert "finish_length" in truncated and "answer discarded: nothing was run" in screen  # the cause
    assert "budget: turns 5/30" in screen and "tokens" in screen and "/$1.00" in screen  # the footer
    assert "+    return sum(values) / len(values)" in screen and "PASS" in screen  # the diff, then the verdict
    assert screen.index("turn 0 COMPLETED") < screen.index("turn 2 TRUNCATED") < screen.index("PASS")


def test_hostile_words_set_no_title_and_no_clipboard_in_tmux(tmp_path, repo, fault: FaultServer, sandbox_image, tmux):
    attack = PAYLOADS["osc0 title"] + PAYLOADS["osc52 clipboard"] + PAYLOADS["sgr8 hidden text"]
    fault.script([Reply(text=f"harmless {attack} words", tokens_per_s=40)])
    pane = tmux(100)
    pane.start(run_args(repo, fault.base_url, "--max-turns", "1"), {"ESCROW_HOME": str(tmp_path / "home")})
    screen = pane.wait_for("EXIT=")
    assert "OWNEDTITLE" not in pane.title()
    assert pane.buffers() == ""  # no OSC 52 clipboard write reached tmux
    assert "harmless" in screen and printable(PAYLOADS["osc0 title"]) in screen
    assert "HIDDENTEXT" in screen  # shown, not hidden by SGR 8


def _bytes_printf(payload: str) -> str:
    return "".join(f"\\{b:03o}" for b in payload.encode())


def test_hostile_content_is_escaped_through_run_and_show(tmp_path, repo, fault: FaultServer, sandbox_image):
    """The model's words, its tool arguments, a command's output and the diff
    all carry every attack; no byte of one reaches the terminal raw."""
    everything = "".join(PAYLOADS.values())
    fault.script([
        Reply(text=everything, tool_calls=(
            tool("bash", command="printf '" + _bytes_printf(everything) + "'"),
            ScriptedToolCall(name="read_file", arguments=json.dumps({"path": "x" + PAYLOADS["osc0 title"]})),
        )),
        Reply(tool_calls=(tool("write_file", path="notes.txt", content=everything + "\n"),)),
    ])
    home = tmp_path / "home"
    code, raw = run_in_pty(run_args(repo, fault.base_url, "--max-turns", "2"), {"ESCROW_HOME": str(home)})
    text = raw.decode("utf-8", "replace")
    assert code == 1, text
    assert "BUDGET_EXHAUSTED" in text and "Traceback" not in text
    assert "notes.txt" in text  # the diff was shown
    assert_safe(text.replace("\r\n", "\n"))
    with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
        run_id = store.runs()[0].run.id
        (bash,) = [e for t in store.trajectory(run_id).turns for e in t.tool_executions if e.tool_name == "bash"]
        assert "\x1b]52" in bash.stdout  # the attack really ran: the raw bytes are recorded as they were

    env = {**os.environ, "ESCROW_HOME": str(home)}
    for extra in ([], ["--full"]):
        shown = subprocess.run(
            [str(ESCROW), "show", run_id, *extra], env=env, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        assert_safe(shown.stdout)
        assert squeezed(printable(PAYLOADS["osc52 clipboard"])) in squeezed(shown.stdout)
    full = squeezed(shown.stdout)  # show folds its lines to the width (80 in a pipe)
    for payload in PAYLOADS.values():
        assert squeezed(printable(payload)) in full, payload  # --full shows each attack whole, escaped
    as_json = subprocess.run(
        [str(ESCROW), "show", run_id, "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert_safe(as_json.stdout)
    assert json.loads(as_json.stdout)["run"]["id"] == run_id


def test_an_error_quoting_hostile_input_is_escaped(tmp_path):
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home")}
    for payload in PAYLOADS.values():
        if "\x00" in payload:
            continue  # an argv cannot carry NUL
        done = subprocess.run([str(ESCROW), "run", "t", "--repo", f"/nonexistent/{payload}", "--verify", "true"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and "error:" in done.stderr
        assert_safe(done.stderr)


def unfolded(text: str) -> list[str]:
    """Plain events, each folded line joined back onto its event's first."""
    events: list[str] = []
    for line in text.splitlines():
        if line.startswith(PLAIN_HANG) and events:
            events[-1] += " " + line.strip()
        else:
            events.append(line)
    return events


def test_plain_lines_off_a_terminal_and_quiet(tmp_path, repo, fault: FaultServer, sandbox_image):
    fault.script(story())
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home")}
    done = subprocess.run(run_args(repo, fault.base_url), env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert all(len(line) <= 80 for line in done.stderr.splitlines()), done.stderr  # a pipe is 80 wide
    lines = unfolded(done.stderr)
    assert any(line.startswith("turn 0 COMPLETED") and f"thinking: {THOUGHT} | {WORDS}" in line for line in lines)
    assert any("read_file calc.py: committed" in line and "exit 0" in line for line in lines)
    assert any("read_file .git/config: rejected at policy" in line for line in lines)
    assert any(line.startswith("turn 2 TRUNCATED (finish_length") for line in lines)
    assert sum(line.startswith("budget: ") for line in lines) == 5  # one per turn
    assert not any(line[:4].isdigit() for line in lines)  # no timestamps
    assert "PASS" in done.stderr and "PASS" not in done.stdout  # piped: stdout is the patch alone

    # The fault server's one model has no price, and the run warns of it.
    assert "model has no price" in done.stderr
    fault.script(story())
    quiet = subprocess.run(  # a priced model: a clean run, quiet, prints the verdict alone
        run_args(repo, fault.base_url, "--quiet", "--model", "gemma-3-270m"), env=env, capture_output=True,
        text=True, timeout=240)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout.startswith("PASS: the verifier passed (run ") and quiet.stdout.count("\n") == 1


def test_ctrl_c_during_a_long_command_ends_the_run_canceled_promptly(tmp_path, repo, fault: FaultServer, sandbox_image,
                                                                     docker_client, tmux):
    """Ctrl-C while ``sleep 60`` runs in the sandbox: the run ends CANCELED
    long before the command would have, with no traceback and no process left."""
    fault.script([Reply(text="Waiting a minute.", tool_calls=(tool("bash", command="sleep 60"),))])
    home = tmp_path / "home"
    pane = tmux(100)
    pane.start(run_args(repo, fault.base_url), {"ESCROW_HOME": str(home)})
    pane.wait_for("Waiting a minute.")
    deadline = time.monotonic() + 120
    while not _sleeping(docker_client, home):
        assert time.monotonic() < deadline, pane.screen()
        time.sleep(0.2)
    pressed = time.monotonic()
    pane.send("C-c")
    screen = pane.wait_for("EXIT=", timeout=120)
    ended = time.monotonic()
    assert "CANCELED" in screen and "Traceback" not in screen and "EXIT=130" in screen  # Ctrl-C: 130, as for batch
    # Order, not a tight bound: the run ended well before the command could have.
    assert ended - pressed < 30, ended - pressed
    assert not _sleeping(docker_client, home)
    with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
        run = store.runs()[0].run
        assert run.verdict == "CANCELED" and run.status == "finished"


def _sleeping(docker_client, home: Path) -> bool:
    """True while the sandbox of the run recorded under ``home`` runs ``sleep
    60``: only its own (another test run on this machine may run the same
    command, and Ctrl-C would then land before this one's had started)."""
    try:
        with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
            runs = store.runs()
    except Exception:  # the run is still creating its store
        return False
    if not runs:
        return False
    return any("sleep 60" in command
               for container in docker_client.containers.list(filters={"label": f"{LABEL_RUN}={runs[0].run.id}"})
               for command in commands_in(container))


def test_repo_dot_in_a_deleted_directory_is_a_clear_error(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"cd {gone} && rmdir {gone} && exec {ESCROW} run t --repo . --verify true --model m"
    done = subprocess.run(["bash", "-c", script], env={**os.environ, "ESCROW_HOME": str(tmp_path / "home")},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: --repo .: No such file or directory" in done.stderr
