"""One live ``escrow run``: wire the components, run the agent, collect the patch.

Fails fast, before anything is recorded, on what the user can fix (repo,
policy, store, Docker daemon, image); once the run is recorded, every ending is
a verdict in the store.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from orchestrator.agent import RunResult, Verdict
from orchestrator.client import ModelClient
from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope
from orchestrator.limits import Tally
from orchestrator.runspec import build_agent
from orchestrator.settings import Settings
from policies.price_table import load_price_table
from policies.pricing import call_cost
from orchestrator.canonical import sha256_hex
from sandbox import Patch, Sandbox, ToolBox, apply_patch, connect, require_image, tool_specs
from sandbox.loop_tools import SandboxTools
from store import Recorder, RunJournal

from cli.compose import ModelProbe, make_spec, open_store, resolve_policy, resolve_repo

Progress = Callable[[int, Envelope, Tally], None]


class RunOutcome(Frozen):
    run_id: str
    result: RunResult
    patch: str
    patch_files: tuple[str, ...]
    applied: bool


@contextmanager
def sigint_cancels(cancel: threading.Event) -> Iterator[None]:
    """First Ctrl-C cancels cleanly (the in-flight call ends as CANCELED);
    a second one interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):  # noqa: ARG001
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class PatchRecorder:
    """Takes the run's patch from the sandbox and records it before the verdict."""

    def __init__(self, sandbox: Sandbox, recorder: Recorder, run_id: str) -> None:
        self.sandbox, self.recorder, self.run_id = sandbox, recorder, run_id
        self.patch = Patch(text="", sha256=sha256_hex(b""), files=())

    def record(self, result: RunResult) -> None:
        self.patch = self.sandbox.patch()
        self.recorder.record_event(self.run_id, None, "patch", {
            "sha256": self.patch.sha256, "files": list(self.patch.files), "text": self.patch.text,
        })


def execute_run(
    settings: Settings, *, task: str, repo: Path, verifier: str, apply: bool = False,
    progress: Progress | None = None, cancel: threading.Event | None = None,
    on_start: Callable[[str], None] | None = None,
) -> RunOutcome:
    repo_path = resolve_repo(repo)
    policy = resolve_policy(settings)
    docker_client = connect(settings.docker_host)
    require_image(docker_client, settings.sandbox_image)
    price = load_price_table(settings.home).lookup(settings.model)
    if price is None:
        structlog.get_logger("escrow.run").warning(
            "model has no price; its calls cost $0", model=settings.model, hint="escrow price set MODEL ...")
    store = open_store(settings)
    probe = ModelProbe(settings)
    cancel = cancel or threading.Event()
    try:
        recorder = Recorder(store)
        spec = make_spec(
            settings, policy, task=task, verifier=verifier, tool_specs=tool_specs(policy.tools.allowed), probe=probe
        )
        run_id = recorder.start_run(
            task=task, repo=str(repo_path), model=settings.model, policy=policy.model_dump(mode="json"),
            config={"spec": spec.model_dump(mode="json"), "model_url": settings.model_url,
                    "sandbox_image": settings.sandbox_image},
        )
        journal = RunJournal(recorder, run_id)
        if on_start is not None:  # e.g. a batch takes the run's lease
            on_start(run_id)
        structlog.contextvars.bind_contextvars(run_id=run_id)
        # From here on every ending is a recorded verdict: Ctrl-C only sets
        # ``cancel``, also while the sandbox starts, and the run ends CANCELED.
        with sigint_cancels(cancel):
            try:
                sandbox = Sandbox.start(docker_client, settings.sandbox_image, policy, repo_path, run_id=run_id)
            except BaseException as exc:
                verdict = Verdict.CANCELED if isinstance(exc, KeyboardInterrupt) else Verdict.FAULTED
                recorder.finish_run(run_id, verdict.value, f"sandbox did not start: {exc!r}")
                raise
            with sandbox, ModelClient(settings.model_url, api_key=settings.api_key) as client:
                tools = SandboxTools(ToolBox(sandbox, policy, verifier_command=verifier), policy)
                agent = build_agent(
                    spec, counter=probe.counter, model=client, tools=tools, journal=journal,
                    cost_of=lambda envelope: call_cost(envelope, price), cancel=cancel, on_turn=progress,
                )

                patches = PatchRecorder(sandbox, recorder, run_id)
                result = agent.run(before_verdict=patches.record)
        patch = patches.patch
        applied = False
        if apply and result.verdict is Verdict.PASS and not patch.empty:
            apply_patch(patch, repo_path)
            applied = True
        return RunOutcome(run_id=run_id, result=result, patch=patch.text, patch_files=patch.files, applied=applied)
    finally:
        structlog.contextvars.unbind_contextvars("run_id")
        probe.close()
        store.close()
