"""A run recorded through the real loop with token ids (stored as deltas)
replays offline to the same digest, and its replay stores the same envelope
bytes and reads back the same ids."""

from __future__ import annotations

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.replay import Replayer
from store import Store
from tests.replay.recording import fixing_steps, record_memory_run
from tests.tokens.conftest import EOT, NL
from tests.tokens.test_token_storage import stored


def with_ids(steps: list) -> list:
    out, prompt = [], [2, 5, 6]
    for n, step in enumerate(steps):
        sampled = [1000 + 10 * n, 1001 + 10 * n, EOT]
        out.append(step.model_copy(update={"prompt_token_ids": list(prompt), "completion_token_ids": sampled,
                                           "usage": "none"}))
        prompt = prompt + sampled + [NL, 105, 300 + n]
    return out


def test_a_run_with_ids_replays_to_the_same_digest_and_bytes(tmp_path, fault_server: FaultServer):
    with Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run_id = record_memory_run(store, fault_server, with_ids(fixing_steps()))
        recorded = store.calls(run_id)
        assert "prompt_token_ids_delta" in stored(store, run_id)[2]  # as the row holds it
        replayer = Replayer(store)
        report = replayer.offline(replayer.load(run_id))
        assert report.identical and report.digest == report.recorded_digest
        replayed = store.calls(report.replay_run_id)
        assert [c.response.envelope_sha256 for c in replayed if c.response] == [
            c.response.envelope_sha256 for c in recorded if c.response]
        original, again = store.run_tokens(run_id), store.run_tokens(report.replay_run_id)
        assert original.summary() == again.summary() == f"{len(recorded)} of {len(recorded)} calls CLEAN"
        whole = [c.response.envelope().prompt_token_ids for r in store.trajectory(report.replay_run_id).turns
                 for c in r.calls if c.response]
        assert whole[-1] is not None and whole[-1][:3] == (2, 5, 6) and len(whole[-1]) == 3 + 6 * (len(whole) - 1)
