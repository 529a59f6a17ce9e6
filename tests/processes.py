"""The one way tests run Escrow's CLI as a process.

Its environment is this process's less every ``ESCROW_*`` variable, with
``ESCROW_HOME`` set to the test's own: a person who runs the tests with
``ESCROW_DB_URL`` (or any other setting) in their environment never has a
test read or write their store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ESCROW = Path(sys.executable).parent / "escrow"
# The CLI's entry point through this interpreter: the form a test uses when it
# needs the interpreter's own flags or a probe around main().
IN_PROCESS = (sys.executable, "-c", "from cli.main import main; main()")
# The test harness's own variables, set by scripts/test or a developer: where
# the servers and caches are, not settings of Escrow's.
HARNESS_VARIABLES = ("ESCROW_TEST_", "ESCROW_SHARED_DIR", "ESCROW_CACHE")


def cli_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without a person's Escrow settings, with
    ``ESCROW_HOME`` (when given) and ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCROW_") or k.startswith(HARNESS_VARIABLES)}
    if home is not None:
        env["ESCROW_HOME"] = str(home)
    env.update(extra)
    return env


def run_escrow(home: Path | None, *args: str, env: dict[str, str] | None = None, timeout: float = 300,
               entry: tuple[str, ...] = (str(ESCROW),), cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``escrow ARGS`` to its end: its exit code, stdout and stderr."""
    return subprocess.run([*entry, *args], env=env if env is not None else cli_env(home), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, check=False)


def start_escrow(home: Path | None, *args: str, env: dict[str, str] | None = None,
                 entry: tuple[str, ...] = (str(ESCROW),), merge_stderr: bool = False) -> subprocess.Popen[str]:
    """``escrow ARGS`` started, its stdout (and stderr) piped."""
    return subprocess.Popen([*entry, *args], env=env if env is not None else cli_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, text=True)
