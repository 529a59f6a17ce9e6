"""Shared gates for tests that need real parts.

Under CI=true a missing Docker daemon, sandbox image or model server FAILS the
test that needs it; on a developer machine it skips with the reason. The
services themselves are started by scripts/test (and so by .ci/run).
"""

from __future__ import annotations

import os

import httpx
import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.settings import DEFAULT_SANDBOX_IMAGE
from tests.processes import HARNESS_VARIABLES

IN_CI = os.environ.get("CI", "").lower() == "true"

# A person's own settings (ESCROW_DB_URL, ESCROW_HOME, ...) never reach a test
# or a process it starts: a test reads and writes only the stores it made.
# The suite's own variables (tests.processes.HARNESS_VARIABLES) stay.
for _name in [n for n in os.environ if n.startswith("ESCROW_") and not n.startswith(HARNESS_VARIABLES)]:
    del os.environ[_name]

LLAMA_URL = os.environ.get("ESCROW_TEST_LLAMA_URL", "http://127.0.0.1:8088")
SANDBOX_IMAGE = os.environ.get("ESCROW_TEST_SANDBOX_IMAGE", DEFAULT_SANDBOX_IMAGE)
# The runtimes every sandbox test (attacks and containment first) and the
# e2e attack tests run under: runsc, the default where dockerd has it, and
# runc, which a machine without gVisor gets (ESCROW_TEST_SANDBOX_RUNTIMES=runc
# for one of them).
SUITE_RUNTIMES = tuple(os.environ.get("ESCROW_TEST_SANDBOX_RUNTIMES", "runsc,runc").split(","))


# scripts/test runs the suite on two workers, then the tests marked solo alone
# (pyproject's marker says which). Every test of these folders is solo: their
# batches start up to fifty sandboxes and two Ray nodes at once, and sweep
# every sandbox whose owner is gone.
SOLO_FOLDERS = ("batch",)


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = config.rootpath / "tests"
    for item in items:
        parts = item.path.relative_to(tests_root).parts if item.path.is_relative_to(tests_root) else ()
        if parts and parts[0] in SOLO_FOLDERS:
            item.add_marker(pytest.mark.solo)


def require(ok: bool, what: str) -> None:
    """Fail under CI, skip elsewhere."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI but unavailable")
    pytest.skip(f"{what} unavailable (would fail under CI=true)")


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:  # any failure to reach the daemon means "not available"
        require(False, f"Docker daemon ({exc.__class__.__name__})")
    return client


@pytest.fixture(scope="session")
def sandbox_image(docker_client) -> str:
    import docker.errors

    try:
        docker_client.images.get(SANDBOX_IMAGE)
    except docker.errors.ImageNotFound:
        require(False, f"sandbox image {SANDBOX_IMAGE} (run: escrow sandbox build)")
    return SANDBOX_IMAGE


@pytest.fixture(scope="session")
def default_runtime(docker_client) -> str:
    """The runtime a run gets here (``auto``). CI's set-up registers runsc, so
    there a machine that falls back to runc FAILS rather than quietly testing
    the host's kernel only."""
    from sandbox.runtime import choose_runtime

    choice = choose_runtime(docker_client, "auto")
    if IN_CI and choice.name != "runsc":
        pytest.fail(f"gVisor's runsc is required in CI but dockerd lacks it ({choice.why})")
    return choice.name


@pytest.fixture(scope="session")
def sandbox_runtime(default_runtime) -> str:
    """The runtime of the sandboxes a test starts itself; tests/sandbox runs
    its tests under both."""
    return default_runtime


@pytest.fixture(scope="session")
def llama_url() -> str:
    """Root URL of the local llama.cpp server (no /v1 suffix)."""
    try:
        ok = httpx.get(f"{LLAMA_URL}/v1/models", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        ok = False
    require(ok, f"llama.cpp model server at {LLAMA_URL}")
    return LLAMA_URL


@pytest.fixture(scope="session")
def fault_server_session():
    """One real fault-injection server on loopback for the whole session."""
    with FaultServer() as server:
        yield server


@pytest.fixture
def fault_server(fault_server_session: FaultServer) -> FaultServer:
    """The session's fault server with an empty script and no recorded traffic."""
    fault_server_session.reset()
    return fault_server_session


# Debian's chromium driven by Playwright. One session-wide browser for the
# whole run: two sync_playwright() sessions cannot share the main thread.
CHROMIUM = os.environ.get("ESCROW_TEST_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="session")
def browser():
    require(os.path.exists(CHROMIUM), f"Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    opened = context.new_page()
    yield opened
    context.close()


@pytest.fixture
def tmux(tmp_path):
    """Opens private tmux panes of a chosen width (tests/e2e/terminal.py); closes them after the test."""
    from tests.e2e.terminal import Tmux

    opened: list[Tmux] = []

    def _open(width: int) -> Tmux:
        pane = Tmux(tmp_path / f"tmux-{width}-{len(opened)}.sock", width)  # one server a pane
        opened.append(pane)
        return pane

    yield _open
    for pane in opened:
        pane.close()
