"""Offline replay: every recorded run replays byte-identically, request by
request, to the same content digest, in separate processes with different
hash seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.replay import Replayer
from store import Store
from tests.replay.recording import call, record_memory_run, record_varied_runs, reply

ESCROW = str(Path(sys.executable).with_name("escrow"))


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory, fault_server_session: FaultServer) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("varied") / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        return db, record_varied_runs(store, fault_server_session)


def test_every_varied_run_replays_identically(varied):
    db, runs = varied
    with Store.open(f"sqlite:///{db}") as store:
        replayer = Replayer(store)
        for name, run_id in runs.items():
            recorded_calls = store.calls(run_id)
            report = replayer.offline(replayer.load(run_id))
            assert report.identical, (name, report.divergence)
            assert [t.replayed_sha256 for t in report.turns] == [c.request_sha256 for c in recorded_calls], name
            assert report.digest == report.recorded_digest
            assert report.verdict == store.run(run_id).verdict
            replay_run = store.run(report.replay_run_id)
            assert (replay_run.mode, replay_run.parent_run_id, replay_run.verdict) == ("replay", run_id, report.verdict)
            assert store.verify(report.replay_run_id).ok
            assert [c.request_sha256 for c in store.calls(report.replay_run_id)] == [
                c.request_sha256 for c in recorded_calls
            ]


def test_a_replay_run_replays_identically_too(varied):
    db, runs = varied
    with Store.open(f"sqlite:///{db}") as store:
        replayer = Replayer(store)
        first = replayer.offline(replayer.load(runs["fixing"]))
        second = replayer.offline(replayer.load(first.replay_run_id))
        assert second.identical and second.digest == first.digest == first.recorded_digest


def test_no_record_checks_without_writing(varied):
    db, runs = varied
    with Store.open(f"sqlite:///{db}") as store:
        before = len(store.runs(limit=1000))
        report = Replayer(store).offline(Replayer(store).load(runs["word_tokenizer"]), record=False)
        assert report.identical and report.replay_run_id is None and report.digest is None
        assert len(store.runs(limit=1000)) == before


def test_wall_time_limit_does_not_replay(store: Store, fault_server: FaultServer):
    """A run stopped by its wall-time limit replays to the same point; the
    replay runs past it only into the end of the recording, which is no divergence."""
    from policies import default_policy

    policy = default_policy()
    policy = policy.model_copy(update={"limits": policy.limits.model_copy(update={"max_wall_s": 0.3})})
    slow = reply(call("list_files")).model_copy(update={"delay_s": 0.4})
    run_id = record_memory_run(store, fault_server, [slow, reply(call("list_files"))], policy=policy)
    assert store.run(run_id).verdict_detail.startswith("wall_time")
    replayer = Replayer(store)
    report = replayer.offline(replayer.load(run_id))
    assert report.identical and len(report.turns) == 1
    assert "wall-time" in report.notes[0]


def _replay_in_subprocess(db: Path, run_id: str, seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed, "ESCROW_HOME": str(db.parent)}
    done = subprocess.run([ESCROW, "replay", run_id, "--db", f"sqlite:///{db}", "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_replays_agree_across_processes_and_hash_seeds(varied):
    db, runs = varied
    with Store.open(f"sqlite:///{db}", readonly=True) as store:
        recorded = {run_id: [c.request_sha256 for c in store.calls(run_id)] for run_id in runs.values()}
    for name, run_id in runs.items():
        one, two = (_replay_in_subprocess(db, run_id, seed) for seed in ("1", "2"))
        assert one["identical"] and two["identical"], name
        assert (
            [t["replayed_sha256"] for t in one["turns"]]
            == [t["replayed_sha256"] for t in two["turns"]]
            == recorded[run_id]
        )
        assert one["digest"] == two["digest"] == one["recorded_digest"], name
        assert one["replay_run_id"] != two["replay_run_id"]


def test_the_incremental_request_hash_equals_the_contract_hash(varied, monkeypatch):
    """The hasher extends a running hash only while each request repeats the
    previous one's messages as the same objects, as the context hands them
    back; so the recorded requests are rebuilt that way (one object per
    distinct message), and fresh running hashes are counted to prove that the
    incremental path, not only the restart, produced the matching hashes."""
    import hashlib

    from orchestrator.contract import Message, ModelRequest
    from orchestrator.replay import replay_model
    from orchestrator.replay.replay_model import RequestHasher

    fresh: list[int] = []

    class CountingHashlib:
        @staticmethod
        def sha256(data: bytes = b""):
            fresh.append(1)
            return hashlib.sha256(data)

    monkeypatch.setattr(replay_model, "hashlib", CountingHashlib)
    db, runs = varied
    extended: dict[str, int] = {}
    with Store.open(f"sqlite:///{db}", readonly=True) as store:
        for name, run_id in runs.items():
            hasher, pool = RequestHasher(), {}
            calls = store.calls(run_id)
            extended[name] = 0 if len(calls) > 1 else 1
            for recorded in calls:
                parsed = ModelRequest.model_validate_json(recorded.request_json)
                shared: tuple[Message, ...] = tuple(pool.setdefault(m.model_dump_json(), m) for m in parsed.messages)
                request = parsed.model_copy(update={"messages": shared})
                before = len(fresh)
                assert hasher.canonical(request) == request.canonical()
                assert hasher.sha256(request) == request.sha256() == recorded.request_sha256, name
                extended[name] += len(fresh) == before
    # Every run of more than one call extended its running hash at least once.
    assert all(extended.values()), f"running hash restarted on every request: {extended}"


def test_the_request_hasher_follows_every_change_of_the_fields_around_the_messages() -> None:
    """The hasher serialises the fields around the messages once while they
    hold; a change of any of them (or of the tool list) within a run must
    give the request's own hash, turn after turn."""
    from orchestrator.contract import Message, ModelRequest, Sampling, ToolSpec
    from orchestrator.replay.replay_model import RequestHasher

    bash = (ToolSpec(name="bash", description="run", parameters={"type": "object"}),)
    history: list[Message] = []
    hasher = RequestHasher()
    changes = [{}, {}, {"max_tokens": 65}, {"max_tokens": 65}, {"sampling": Sampling(temperature=0.7)},
               {"tools": bash}, {"tools": bash}, {"tool_choice": "auto"}, {}, {"stop": ("END",)}, {}]
    for turn, change in enumerate(changes):
        history.append(Message(role="user" if turn % 2 == 0 else "assistant", content=f"turn {turn}"))
        request = ModelRequest(model="m", messages=tuple(history), max_tokens=64).model_copy(update=change)
        assert hasher.sha256(request) == request.sha256(), (turn, change)
        assert hasher.canonical(request) == request.canonical(), (turn, change)


def test_the_request_hasher_serialises_the_same_tools_once_though_each_request_holds_a_new_tuple(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Validating a request copies its tool list into a new tuple of the same
    (frozen) objects; the hasher must reuse their text then, and only then:
    reordered or changed tools give the request's own hash."""
    from orchestrator.contract import Message, ModelRequest, ToolSpec
    from orchestrator.replay.replay_model import RequestHasher

    bash = ToolSpec(name="bash", description="run", parameters={"type": "object"})
    edit = ToolSpec(name="edit", description="edit a file", parameters={"type": "object"})
    edited = ToolSpec(name="edit", description="edit one file", parameters={"type": "object"})
    dumped: list[str] = []
    real_dump = ToolSpec.model_dump
    monkeypatch.setattr(ToolSpec, "model_dump", lambda self, **kw: dumped.append(self.name) or real_dump(self, **kw))
    hasher = RequestHasher()
    history: list[Message] = []
    tool_lists = [[bash, edit], [bash, edit], [bash, edit], [edit, bash], [bash, edited], [bash, edited]]
    held: list[tuple[ToolSpec, ...]] = []
    for turn, tools in enumerate(tool_lists):
        history.append(Message(role="user" if turn % 2 == 0 else "assistant", content=f"turn {turn}"))
        request = ModelRequest(model="m", messages=tuple(history), tools=tuple(tools), max_tokens=64)
        assert all(request.tools is not earlier for earlier in held)
        held.append(request.tools)
        dumped_before = len(dumped)
        assert hasher.sha256(request) == request.sha256(), turn
        assert hasher.canonical(request) == request.canonical(), turn
        assert len(dumped) - dumped_before == (0 if turn and tools == tool_lists[turn - 1] else 2), (turn, dumped)
