"""What replay refuses, and how: unknown runs, broken chains (unless
--force), stores at an older schema, runs without a readable spec, flag
mistakes. Each is one clear line and an exit code, never a traceback."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.errors import EscrowError
from store import Recorder, Store
from store.schema.migrations import V2_INDEXES, V3_INDEXES
from tests.replay.recording import fixing_steps, record_memory_run
from tests.replay.test_offline import ESCROW


@pytest.fixture
def recorded(store: Store, db_path: Path, fault_server: FaultServer) -> tuple[Path, str]:
    return db_path, record_memory_run(store, fault_server, fixing_steps())


def replay(db: Path, *args: str):
    return CliRunner().invoke(app, ["replay", *args, "--db", f"sqlite:///{db}"])


def code(result) -> int:
    """The exit code ``escrow`` exits with (cli.main.main maps typed errors)."""
    error = result.exception
    return error.exit_code if isinstance(error, EscrowError) else result.exit_code


def sql(db: Path, statement: str, *params: object) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(statement, params)


def test_unknown_run_id(recorded):
    db, _ = recorded
    result = replay(db, "feedfacefeedface")
    assert code(result) == 6 and "no run matches" in str(result.exception)


def test_a_broken_chain_is_refused_unless_forced(recorded):
    db, run_id = recorded
    sql(db, "UPDATE events SET data_json = '{\"action\":\"tampered\"}' WHERE run_id = ? AND kind = 'route'", run_id)
    refused = replay(db, run_id)
    assert code(refused) == 2 and "does not verify" in str(refused.exception) and "--force" in str(refused.exception)
    forced = replay(db, run_id, "--force", "--no-record")
    assert code(forced) == 0, forced.output
    assert "IDENTICAL" in forced.output


def test_a_tampered_recording_replayed_with_force_reports_where(recorded):
    db, run_id = recorded
    sql(
        db, "UPDATE tool_executions SET \"gen_ai.tool.call.result\" = 'README.md' WHERE run_id = ? AND turn = 0", run_id
    )
    result = replay(db, run_id, "--force", "--json")
    assert code(result) == 1
    assert '"field": "messages[3].content"' in result.output and '"turn": 1' in result.output


STORED_ALTERATIONS = {
    # The tools list the requests refer to: a tool's description, as the model was told it.
    "tools blob": "UPDATE blobs SET body = replace(body, '\"description\":\"', '\"description\":\"X') "
                  "WHERE body LIKE '[{%\"parameters\"%'",
    # A message of the requests (the system prompt), stored once for all of them.
    "message blob": "UPDATE blobs SET body = replace(body, '\"role\":\"system\"', '\"role\":\"system\",\"x\":1') "
                    "WHERE body LIKE '{%\"role\":\"system\"%'",
    # The rest of one request (its sampling and limits), kept on its row.
    "request body": "UPDATE model_calls SET request_body = replace(request_body, '\"max_tokens\":', "
                    "'\"max_tokens\":1') WHERE turn = 0",
}


@pytest.mark.parametrize("alteration", list(STORED_ALTERATIONS))
def test_forced_replay_of_an_altered_stored_request_is_not_identical(recorded, alteration):
    """The hash columns are left as they were, so only a comparison of the
    stored data itself with its hash sees the change."""
    db, run_id = recorded
    with sqlite3.connect(db) as conn:
        changed = conn.execute(STORED_ALTERATIONS[alteration]).rowcount
    assert changed >= 1, "the alteration must hit the store"
    assert code(replay(db, run_id)) == 2, "the chain no longer verifies"
    forced = replay(db, run_id, "--force", "--no-record", "--json")
    assert code(forced) == 1, forced.output
    assert "IDENTICAL" not in forced.output and '"kind": "stored"' in forced.output


def downgrade_to_v1(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        for _, index, _ in V2_INDEXES + V3_INDEXES:
            conn.execute(f'DROP INDEX IF EXISTS "{index}"')
        conn.execute("DELETE FROM escrow_migrations WHERE version > 1")


def test_a_store_at_an_older_schema_is_refused_with_the_migrate_hint(recorded):
    db, run_id = recorded
    downgrade_to_v1(db)
    refused = replay(db, run_id)
    assert code(refused) == 5 and "escrow migrate" in str(refused.exception)
    assert CliRunner().invoke(app, ["migrate", "--db", f"sqlite:///{db}"]).exit_code == 0
    assert code(replay(db, run_id)) == 0


@pytest.mark.parametrize(
    "config, says",
    [
        ({"model_url": "http://x/v1"}, "has no run spec"),
        (
            {"spec": {"task": "t", "model": "m", "s_max": 10, "k_max": 1, "tool_specs": [], "planner": "tree"}},
            "cannot read",
        ),
    ],
)
def test_runs_without_a_readable_spec(store: Store, db_path: Path, config, says):
    run_id = Recorder(store).start_run(task="t", repo="/r", config=config, policy={}, model="m")
    result = replay(db_path, run_id)
    assert code(result) == 2 and says in str(result.exception)


def test_flag_mistakes(recorded, tmp_path: Path):
    db, run_id = recorded
    assert "choose one" in str(replay(db, run_id, "--reexecute", "--fork-at", "1").exception)
    assert "--fork-at only" in str(replay(db, run_id, "--temperature", "0.5").exception)
    assert "turns 0..4" in str(replay(db, run_id, "--fork-at", "9").exception)
    gone = replay(db, run_id, "--reexecute")
    assert code(gone) == 2 and "/memory/calculator" in str(gone.exception)
    missing = replay(tmp_path / "nothing.db", run_id)
    assert code(missing) in (3, 4) and not (tmp_path / "nothing.db").exists()


def test_errors_are_one_line_in_a_real_process(recorded):
    db, run_id = recorded
    downgrade_to_v1(db)
    for args in (["feedface"], [run_id]):
        done = subprocess.run(
            [ESCROW, "replay", *args, "--db", f"sqlite:///{db}"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode in (5, 6) and "Traceback" not in done.stderr
        # One error, folded at 80 columns: where it breaks depends on the
        # store's path, so every line after the first is a continuation.
        first, *folded = done.stderr.strip().splitlines()
        assert first.startswith("error:") and all(line.startswith("  ") for line in folded), done.stderr
