"""tests/processes.py: a CLI process a test starts never sees a person's
Escrow settings, so it can never read or write their store."""

from __future__ import annotations

import os
from pathlib import Path

from tests.processes import HARNESS_VARIABLES, cli_env, run_escrow


def test_a_persons_store_never_reaches_the_cli(monkeypatch, tmp_path: Path) -> None:
    person = tmp_path / "person" / "escrow.db"
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{person}")
    monkeypatch.setenv("ESCROW_POLICY", str(tmp_path / "no-such-policy.toml"))
    assert "ESCROW_DB_URL" not in cli_env(tmp_path / "home")
    listed = run_escrow(tmp_path / "home", "runs", "--json")
    # The CLI looked for the test's own store (none yet: exit 3), not the person's.
    assert listed.returncode == 3, listed.stderr
    assert str(tmp_path / "home" / "escrow.db") in listed.stderr and str(person) not in listed.stderr
    assert not person.parent.exists()  # nothing was created where the person's store would be
    # The test's own variables pass, and so does what the test sets itself.
    monkeypatch.setenv("ESCROW_TEST_MARK", "kept")
    assert cli_env(None, ESCROW_LEASE_S="5") | {} == {**cli_env(None), "ESCROW_LEASE_S": "5"}
    assert cli_env(None)["ESCROW_TEST_MARK"] == "kept"


def test_the_test_session_starts_without_a_persons_settings() -> None:
    """tests/conftest.py removes them from this process too, so a test that
    starts a process its own way inherits none of them."""
    assert [n for n in os.environ if n.startswith("ESCROW_") and not n.startswith(HARNESS_VARIABLES)] == []
