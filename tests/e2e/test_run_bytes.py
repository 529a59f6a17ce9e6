"""Any bytes, end to end: file contents and names that are not UTF-8
(latin-1, invalid sequences, NUL, CR, ``\\xff`` in a name, names that look
like surrogate escapes) go through a real run (fault server, Docker, SQLite)
and end in the model's verdict, never INFRA_ERROR. The recorded patch reads
back from the store as exactly the bytes git produced, its sha256 is theirs,
the chain verifies, ``escrow show`` prints it, and ``--apply`` (of the run,
and of the patch read back from the store) writes those files byte for byte."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.view.static_bundle import export_bundle
from orchestrator.adapters.fault_server import Reply, ScriptedToolCall
from orchestrator.agent import Verdict
from orchestrator.canonical import recorded_bytes
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.composition.launch.compose import resolve_policy
from orchestrator.settings import Settings
from policies import FlagReason
from sandbox import Patch, apply_patch
from store import Store

pytestmark = [pytest.mark.docker]

BUGGY = "sum(values) / (len(values) + 1)"
FIXED = "sum(values) / len(values)"
TASK = "Fix the bug in mean() in calc.py so that the tests pass."
LATIN1 = "caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1")
DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "policies" / "default.toml"


def call(name: str, **args: object) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=json.dumps(args))


def answer(*calls: ScriptedToolCall) -> Reply:
    return Reply(tool_calls=calls)


def bash(command: str) -> ScriptedToolCall:
    return call("bash", command=command)


EDIT = call("edit_file", path="calc.py", old=BUGGY, new=FIXED)
SUBMIT = call("submit", summary="done")


def host_path(root: Path, name: bytes) -> Path:
    return root / os.fsdecode(name)


def run(settings: Settings, repo: Path, *, apply: bool = False, accept_suspect: bool = False):
    request = RunRequest(task=TASK, repo=repo, verify="python3 -m pytest -q -p no:cacheprovider", apply=apply,
                         accept_suspect=accept_suspect)
    return run_agent(settings, request)


class Case:
    """Files put in the repo before the run, a bash command the model runs
    beside its fix, and every file's bytes once the patch is applied."""

    def __init__(self, before: dict[bytes, bytes], command: str | None, after: dict[bytes, bytes]) -> None:
        self.before, self.command, self.after = before, command, after


CASES = {
    "latin1-beside": Case({b"notes.txt": LATIN1}, None, {b"notes.txt": LATIN1}),
    "latin1-changed": Case({b"notes.txt": LATIN1}, r"printf 'cr\xe8me\n' >> notes.txt",
                           {b"notes.txt": LATIN1 + b"cr\xe8me\n"}),
    "latin1-created": Case({}, r"printf 'na\xefve\n' > notes.txt", {b"notes.txt": b"na\xefve\n"}),
    "invalid-utf8": Case({}, r"printf '\xff\xfe ok \xc3( \xed\xa0\x80\n' > bad.txt",
                         {b"bad.txt": b"\xff\xfe ok \xc3( \xed\xa0\x80\n"}),
    "nul": Case({b"blob.bin": b"a\x00b\n"}, r"printf 'a\0b\xff\n\0' > blob.bin && printf 'x\0' > new.bin",
                {b"blob.bin": b"a\x00b\xff\n\x00", b"new.bin": b"x\x00"}),
    "cr-crlf": Case({b"dos.txt": b"one\r\ntwo\r\n"}, r"printf 'one\r\nTWO\r\nthree\rfour\n' > dos.txt"
                    r" && printf 'lone\rcr' > mac.txt",
                    {b"dos.txt": b"one\r\nTWO\r\nthree\rfour\n", b"mac.txt": b"lone\rcr"}),
    "xff-name-in-repo": Case({b"caf\xff.txt": b"old\n", b"keep\xff.txt": b"kept\n"},
                             r"printf 'new \xff\n' > $'caf\xff.txt'",
                             {b"caf\xff.txt": b"new \xff\n", b"keep\xff.txt": b"kept\n"}),
    "xff-name-created": Case({}, r"printf 'x\n' > $'\xff.txt' && mkdir $'d\xfe' && printf 'y' > $'d\xfe/\xff'",
                             {b"\xff.txt": b"x\n", b"d\xfe/\xff": b"y"}),
    # Three names a careless decoding would confuse: the byte 0xff, the bytes
    # of U+DCFF encoded as if it were a character, and the text "\udcff".
    "surrogate-looking-names": Case({b"\\udcff.py": b"# text\n"},
                                    r"printf a > $'\xff.txt' && printf b > $'\xed\xb3\xbf.txt'"
                                    r" && printf c > '\udcff.txt' && printf 'd\n' >> '\udcff.py'",
                                    {b"\xff.txt": b"a", b"\xed\xb3\xbf.txt": b"b", b"\\udcff.txt": b"c",
                                     b"\\udcff.py": b"# text\nd\n"}),
}


def granting_unaccepted_files(tmp_path: Path) -> Path:
    policy = tmp_path / "unaccepted.toml"
    text = DEFAULT_POLICY.read_text()
    policy.write_text(text.replace("unaccepted_files = false", "unaccepted_files = true"))
    assert policy.read_text() != text
    return policy


def seed(repo: Path, files: dict[bytes, bytes]) -> None:
    for name, data in files.items():
        host_path(repo, name).parent.mkdir(parents=True, exist_ok=True)
        host_path(repo, name).write_bytes(data)


def stored_patch(store, run_id: str) -> tuple[dict, bytes]:
    (event,) = store.events(run_id, "patch")
    return event.data, recorded_bytes(event.data)


def cli_reads_the_run(settings: Settings, run_id: str) -> str:
    """``escrow show`` (plain, --full, --json) and ``escrow verify`` of the
    stored run; returns what plain ``show`` printed."""
    runner = CliRunner()
    db = ["--db", settings.store_url]
    outputs = []
    for args in (["show", run_id], ["show", run_id, "--full"], ["show", run_id, "--json"], ["verify", run_id]):
        result = runner.invoke(app, [*args, *db])
        assert result.exit_code == 0, (args, result.output, result.exception)
        outputs.append(result.output)
    json.loads(outputs[2])
    assert outputs[3].startswith("ok ")
    return outputs[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_correct_fix_beside_any_bytes_passes_and_applies_byte_for_byte(
        settings, repo, fault, open_store, tmp_path, name):
    case = CASES[name]
    seed(repo, case.before)
    pristine = tmp_path / "pristine"
    shutil.copytree(repo, pristine)
    calls = [EDIT, *([bash(case.command)] if case.command else []), SUBMIT]
    fault.script([answer(*calls)])
    # Bytes that are not UTF-8 text, and kinds of file the repo lacks, are left
    # out of verification and not applied by default (the verifier's
    # allow-list, tests/e2e/test_run_allow_list.py); this grant writes them.
    # What was left out makes the pass SUSPECT (docs/SANDBOX.md "SUSPECT"),
    # which --accept-suspect applies.
    settings = settings.model_copy(update={"policy": granting_unaccepted_files(tmp_path)})
    outcome = run(settings, repo, apply=True, accept_suspect=True)

    left_out = any(f.reason == FlagReason.NOT_ACCEPTED.value for f in outcome.flagged)
    assert outcome.result.verdict is (Verdict.SUSPECT if left_out else Verdict.PASS), outcome.result.detail
    assert outcome.applied, outcome.apply_refused
    for path, data in case.after.items():
        assert host_path(repo, path).read_bytes() == data, path
    assert FIXED in (repo / "calc.py").read_text()

    store = open_store()
    assert store.verify(outcome.run_id).ok
    data, patch_bytes = stored_patch(store, outcome.run_id)
    (verdict,) = store.events(outcome.run_id, "verdict")
    digest = hashlib.sha256(patch_bytes).hexdigest()
    assert digest == data["sha256"] == verdict.data["patch_sha256"] == outcome.patch_sha256
    assert patch_bytes == outcome.patch_bytes
    assert data["verified"] is True

    # The patch as the store gives it back applies to the starting copy the same
    # way, under the same policy's grants (its flags are recorded with it).
    apply_patch(Patch.from_record(data), pristine, expected_sha256=verdict.data["patch_sha256"],
                allow=resolve_policy(settings).apply.allowed_reasons())
    for path, content in case.after.items():
        assert host_path(pristine, path).read_bytes() == content, path
    assert (pristine / "calc.py").read_bytes() == (repo / "calc.py").read_bytes()

    shown = cli_reads_the_run(settings, outcome.run_id)
    assert outcome.run_id in shown and "PASS" in shown


def test_a_failing_run_with_odd_names_ends_with_the_models_verdict(settings, repo, fault, open_store):
    seed(repo, {b"caf\xff.txt": LATIN1, b"\\udcff.md": b"literal\n"})
    create = bash(r"printf 'x\xfe\n' > $'\xff.txt' && printf 'y' > $'\xed\xb3\xbf'")
    looks = [call("list_files", path="."), call("read_file", path="caf\udcff.txt"), bash("ls; cat caf*")]
    # The bug is never fixed: the verifier fails, then the turn budget runs out.
    fault.script([answer(create, *looks, SUBMIT), answer(SUBMIT)])
    outcome = run(settings.model_copy(update={"max_turns": 2}), repo)

    assert outcome.result.verdict is Verdict.BUDGET_EXHAUSTED, outcome.result.detail
    assert {"\udcff.txt", "\udced\udcb3\udcbf"} <= set(outcome.patch_files)
    store = open_store()
    assert store.verify(outcome.run_id).ok
    data, patch_bytes = stored_patch(store, outcome.run_id)
    assert data["verified"] is False
    assert hashlib.sha256(patch_bytes).hexdigest() == data["sha256"] == outcome.patch_sha256
    assert b'"a/\\377.txt"' in patch_bytes and b"+x\xfe" in patch_bytes
    assert set(data["files"]) == set(outcome.patch_files)
    cli_reads_the_run(settings, outcome.run_id)
    # What reached the model names the odd bytes as \xNN text, so every reader of the record parses it.
    listing = store.trajectory(outcome.run_id).turns[0].tool_executions[1]
    assert "caf\\xff.txt" in listing.observation and "\udcff" not in listing.observation
    for request in store.calls(outcome.run_id):
        request.request()
    runner, db = CliRunner(), ["--db", settings.store_url]
    for fmt in ("messages-jsonl", "atif", "events-jsonl", "otel"):
        result = runner.invoke(app, ["export", outcome.run_id, "--format", fmt, "--include-unverified", *db])
        assert result.exit_code == 0, (fmt, result.output, result.exception)
    replayed = runner.invoke(app, ["replay", outcome.run_id, "--json", *db])
    assert replayed.exit_code == 0, (replayed.output, replayed.exception)
    export_bundle(store, settings.home / "bundle", [outcome.run_id])
    page = (settings.home / "bundle" / f"run-{outcome.run_id}.html").read_text(encoding="utf-8")
    assert "\\xff.txt" in page


def test_escrow_run_prints_the_patch_to_read_and_its_exact_bytes(tmp_path, repo, fault, sandbox_image):
    """``escrow run`` as a subprocess: in a pipe, stdout is the patch's exact
    bytes (latin-1 included) and the verdict goes to stderr; under --json,
    ``patch_base64``."""
    seed(repo, {b"notes.txt": LATIN1})
    fault.script([answer(EDIT, bash(r"printf 'cr\xe8me\n' >> notes.txt"), SUBMIT)] * 2)
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home")}
    base = [str(Path(sys.executable).parent / "escrow"), "run", TASK, "--repo", str(repo), "--verify",
            "python3 -m pytest -q -p no:cacheprovider", "--model-url", fault.base_url, "--context-window", "8192",
            "--tokenizer", "cl100k_base"]
    # A latin-1 notes.txt is not UTF-8: the verifier's allow-list leaves it
    # out, so the fix's pass is SUSPECT (exit 1, a finding); the patch printed
    # is still the recorded one, byte for byte.
    shown = subprocess.run([*base, "--plain"], env=env, capture_output=True, timeout=180)
    assert shown.returncode == 1 and b"Traceback" not in shown.stderr, shown.stderr
    assert b"+cr\xe8me" in shown.stdout and b"SUSPECT" not in shown.stdout and b"SUSPECT" in shown.stderr

    done = subprocess.run([*base, "--json"], env=env, capture_output=True, timeout=180)
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr
    out = json.loads(done.stdout)
    exact = base64.b64decode(out["patch_base64"])
    assert b"+cr\xe8me" in exact and "+cr\\xe8me" in out["patch"]
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'escrow.db'}", readonly=True, create=False) as store:
        (verdict,) = store.events(out["run_id"], "verdict")
        assert hashlib.sha256(exact).hexdigest() == verdict.data["patch_sha256"]


def test_a_piped_run_prints_the_recorded_patch_byte_for_byte(tmp_path, repo, fault, sandbox_image):
    """Issue 27: the diff was cut to 80 columns in a pipe (a 135-character
    added line kept 80, the ``index`` line lost its hash's end and its mode).
    Piped, stdout is the recorded patch itself, whatever its line lengths."""
    long_line = "x = '" + "long " * 40 + "'"  # 206 characters
    assert len(long_line) > 200
    fault.script([answer(EDIT, call("write_file", path="wide.py", content=long_line + "\n"),
                         bash("chmod +x wide.py"), SUBMIT)])
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home"), "COLUMNS": "80"}
    args = [str(Path(sys.executable).parent / "escrow"), "run", TASK, "--repo", str(repo), "--verify",
            "python3 -m pytest -q -p no:cacheprovider", "--model-url", fault.base_url, "--context-window", "8192",
            "--tokenizer", "cl100k_base"]
    done = subprocess.run(args, env=env, capture_output=True, timeout=180)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'escrow.db'}", readonly=True, create=False) as store:
        (patch,) = store.events(store.runs()[0].run.id, "patch")
        recorded = recorded_bytes(patch.data)
    assert f"+{long_line}\n".encode() in recorded and b"new file mode 100755" in recorded
    assert done.stdout == recorded
    assert b"PASS" in done.stderr  # the verdict, off the data stream
    subprocess.run(["git", "apply", "--check", "-"], input=done.stdout, cwd=repo, check=True)
