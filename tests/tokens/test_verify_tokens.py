"""``escrow verify`` fails a run whose recorded ids contradict its own usage."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from orchestrator.envelope import Usage
from store.store import Store
from tests.tokens.test_token_storage import envelope, growing_prompts, record


def verify(db, run_id):
    result = CliRunner().invoke(app, ["verify", run_id, "--db", f"sqlite:///{db}", "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_ids_that_agree_with_usage_verify(tmp_path):
    db = tmp_path / "e.db"
    with Store.open(f"sqlite:///{db}") as store:
        run_id = record(store, growing_prompts(3))
    code, data = verify(db, run_id)
    assert code == 0, data


def test_ids_that_contradict_usage_fail_verify_with_the_row_named(tmp_path, monkeypatch):
    import tests.tokens.test_token_storage as storage

    def lying(prompt, sampled):
        good = envelope(prompt, sampled)
        return good.model_copy(update={"usage": Usage(prompt_tokens=len(prompt) + 1, completion_tokens=len(sampled),
                                                       prompt_source="server", completion_source="server")})

    db = tmp_path / "e.db"
    with Store.open(f"sqlite:///{db}") as store:
        run_id = record(store, growing_prompts(2))
        monkeypatch.setattr(storage, "envelope", lying)
        record(store, growing_prompts(3)[2:], run_id=run_id, first_turn=2)
        check = store.verify(run_id)
    assert not check.ok and check.table == "model_responses" and check.row_id
    assert check.problem == ("recorded token ids contradict the call's figures: "
                             f"{len(growing_prompts(3)[2])} prompt ids, usage.prompt_tokens "
                             f"{len(growing_prompts(3)[2]) + 1}")
    code, _ = verify(db, run_id)
    assert code == 1


def test_a_negative_id_fails_verify(tmp_path):
    db = tmp_path / "e.db"
    with Store.open(f"sqlite:///{db}") as store:
        run_id = record(store, [[2, 3, -1]])
        check = store.verify(run_id)
    assert not check.ok and "negative" in (check.problem or "")
