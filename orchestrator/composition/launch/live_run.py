"""One live ``escrow run``: the parts wired (``compose.wire``), then the
run's lifecycle: recorded, sandboxed, the loop, the verdict, the patch applied.

Fails fast, before anything is recorded, on what the user can fix (repo,
policy, store, Docker daemon, image); once the run is recorded, every ending is
a verdict in the store.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import structlog

from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.token_exact import TokenExactClient
from orchestrator.agent import VERIFIED, RunResult, Verdict
from orchestrator.canonical import shown_text
from orchestrator.composition.launch.compose import RunRequest, Wiring, wire
from orchestrator.composition.launch.heartbeat import Heartbeat
from orchestrator.context.tokenizer import TokenCounter
from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope
from orchestrator.limits import Tally
from orchestrator.observer import ObservedJournal, RunObserver
from orchestrator.perimeter import acl_of
from orchestrator.ports import Model
from orchestrator.runspec import build_agent
from orchestrator.settings import Settings
from policies import Flag
from policies.pricing import call_cost
from sandbox import Patch, Sandbox, ToolBox, apply_patch
from sandbox.errors import ApplyRefused, ExportRefused
from sandbox.export_stream import Skipped
from sandbox.loop_tools import SandboxTools
from store import Recorder, RunJournal, Store
from store.read.liveness import LeaseClaim, is_open

Progress = Callable[[int, Envelope, Tally], None]
AroundModel = Callable[[Model, TokenCounter], tuple[Model, TokenCounter]]


class RunOutcome(Frozen):
    """How a run ended. ``patch`` is the diff to read (exact when it is UTF-8,
    each other byte shown ``\\xNN``); ``patch_bytes`` is exactly what
    ``--apply`` writes and ``patch_sha256`` is of."""

    run_id: str
    result: RunResult
    patch: str
    patch_bytes: bytes = b""
    patch_files: tuple[str, ...]
    applied: bool
    patch_sha256: str = ""
    skipped: tuple[Skipped, ...] = ()
    flagged: tuple[Flag, ...] = ()
    apply_refused: str | None = None  # why --apply wrote nothing (ApplyRefused's message)


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


@contextmanager
def verdict_on_failure(store: Store, recorder: Recorder, run_id: str) -> Iterator[None]:
    """Backstop for what escapes the agent's own INFRA_ERROR handling (e.g.
    building it): the run still ends with a recorded verdict."""
    try:
        yield
    except BaseException as exc:
        if is_open(store.run(run_id).status):
            verdict = Verdict.CANCELED if isinstance(exc, KeyboardInterrupt) else Verdict.INFRA_ERROR
            recorder.finish_run(run_id, verdict.value, f"{type(exc).__name__}: {exc}"[:2000])
        raise


class PatchRecorder:
    """Records the run's patch before the verdict: on PASS the patch that
    passed (snapshotted at submit, never re-exported); otherwise the
    workspace as it is now, for the user to look at."""

    def __init__(self, sandbox: Sandbox, toolbox: ToolBox, recorder: Recorder, run_id: str) -> None:
        self.sandbox, self.toolbox, self.recorder, self.run_id = sandbox, toolbox, recorder, run_id
        self.patch = Patch.none()

    def record(self, result: RunResult) -> None:
        data: dict[str, object]
        if result.verdict in VERIFIED and self.toolbox.submitted is not None:
            self.patch = self.toolbox.submitted
            data = {**self.patch.record(), "verified": True}
        else:
            try:
                self.patch = self.toolbox.flagged(self.toolbox.workspace_patch())
                data = {**self.patch.record(), "verified": False}
            except ExportRefused as exc:
                data = {**self.patch.record(), "verified": False, "error": str(exc)}
        self.recorder.record_event(self.run_id, None, "patch", data)


def suspect_refusal(result: RunResult) -> str:
    """Why ``--apply`` wrote nothing of a SUSPECT patch, its reasons named."""
    named = "; ".join(r.shown() for r in result.suspect[:5])
    more = f"; and {len(result.suspect) - 5} more" if len(result.suspect) > 5 else ""
    return (f"the run is SUSPECT: its patch touches the machinery of verification ({named}{more}); nothing "
            "was written (look at the patch, then --accept-suspect to apply it)")


def early_verifier_wanted(settings: Settings, request: RunRequest) -> bool:
    """Whether the verifier's container starts while the agent works: as set,
    else for a single run only. A batch admits its sandbox starts a few at a
    time (--start-slots); an early start beside each would not wait its turn."""
    return settings.verify_early if settings.verify_early is not None else request.batch is None


def run_agent(
    settings: Settings | Wiring, request: RunRequest, *, progress: Progress | None = None,
    cancel: threading.Event | None = None, observer: RunObserver | None = None,
    on_start: Callable[[str], None] | None = None, lease: LeaseClaim | None = None,
    start_sandbox: Callable[..., Sandbox] = Sandbox.start, around_model: AroundModel = lambda m, c: (m, c),
) -> RunOutcome:
    """Run the agent once. ``settings`` may be the parts already wired from
    them for ``request`` (``compose.wire``: ``escrow run`` shows its policy's
    limits first); run_agent closes them. Raises typed errors (ConfigError,
    SandboxError, StoreError) for what fails before the run is recorded;
    after that every ending is a recorded verdict. ``lease`` is taken with
    the run's creation, and ``on_start`` called with its id (a batch's lease
    and heartbeat). ``start_sandbox`` stands in for ``Sandbox.start`` (a
    batch bounds it with its start deadline); ``around_model`` wraps the
    model client and the token counter (a batch holds their requests to a
    replica's slot count). ``progress`` is told each turn's end."""
    cancel = cancel or threading.Event()
    with settings if isinstance(settings, Wiring) else wire(settings, request) as wiring:
        # Every run holds a lease from its first row: a batch brings its own
        # (with its heartbeat, ``on_start``); any other run renews one here.
        heartbeat = None
        if lease is None:
            heartbeat = Heartbeat(wiring.store, wiring.settings.lease_s)
            lease = heartbeat.claim()
        try:
            recorder = Recorder(wiring.store)
            run_id = record_start(wiring, request, recorder, lease)
            if heartbeat is not None:
                heartbeat.started(run_id)
            if on_start is not None:  # e.g. a batch starts renewing the run's lease
                on_start(run_id)
            structlog.contextvars.bind_contextvars(run_id=run_id)
            # From here on every ending is a recorded verdict: Ctrl-C only sets
            # ``cancel``, also while the sandbox starts, and the run ends CANCELED.
            with sigint_cancels(cancel):
                sandbox = start_recorded(start_sandbox, wiring, recorder, run_id)
                result, patch = run_in_sandbox(sandbox, wiring, request, recorder, run_id, cancel=cancel,
                                               observer=observer, progress=progress, around_model=around_model)
            return applied_outcome(wiring, request, run_id, result, patch)
        finally:
            if heartbeat is not None:
                heartbeat.close()
            structlog.contextvars.unbind_contextvars("run_id")


def record_start(wiring: Wiring, request: RunRequest, recorder: Recorder, lease: LeaseClaim) -> str:
    """The run's row, with its spec and what it runs on, and its lease."""
    settings = wiring.settings
    return recorder.start_run(
        task=request.task, repo=str(wiring.repo), model=settings.model_name,
        policy=wiring.policy.model_dump(mode="json"),
        config={"spec": wiring.spec.model_dump(mode="json"), "model_url": wiring.model_url.url,
                "sandbox_image": settings.sandbox_image, "sandbox_runtime": wiring.runtime.name,
                **({"workspace_sha256": request.workspace_sha256} if request.workspace_sha256 else {}),
                **({"batch": request.batch} if request.batch else {})},
        lease=lease,
    )


def start_recorded(start_sandbox: Callable[..., Sandbox], wiring: Wiring, recorder: Recorder, run_id: str) -> Sandbox:
    """The run's sandbox; one that does not start ends the run with its verdict."""
    try:
        return start_sandbox(wiring.docker, wiring.settings.sandbox_image, wiring.policy, wiring.repo,
                             run_id=run_id, runtime=wiring.runtime.name)
    except BaseException as exc:
        verdict = Verdict.CANCELED if isinstance(exc, KeyboardInterrupt) else Verdict.INFRA_ERROR
        recorder.finish_run(run_id, verdict.value, f"sandbox did not start: {exc!r}")
        raise


def run_in_sandbox(
    sandbox: Sandbox, wiring: Wiring, request: RunRequest, recorder: Recorder, run_id: str, *,
    cancel: threading.Event, observer: RunObserver | None, progress: Progress | None, around_model: AroundModel,
) -> tuple[RunResult, Patch]:
    """The agent loop of the recorded run in its started sandbox, talking to
    the model; the patch recorded before the verdict."""
    settings, policy, price = wiring.settings, wiring.policy, wiring.price
    journal = RunJournal(recorder, run_id)
    client: ModelClient | TokenExactClient = wiring.token_model or ModelClient(
        wiring.model_url.url, api_key=settings.api_key, observer=observer)
    with sandbox, client:
        recorder.record_event(run_id, None, "engine", client.engine_info().model_dump(mode="json"))
        with verdict_on_failure(wiring.store, recorder, run_id):
            toolbox = ToolBox(sandbox, policy, verifier_command=request.verify, cancel=cancel,
                              verifier_patch=request.verify_patch, required_tests=request.required_tests)
            if early_verifier_wanted(settings, request):
                toolbox.start_early()  # the first submit's pre-pass, while the agent works
            model, counter = around_model(client, wiring.probe.counter)
            agent = build_agent(
                wiring.spec, counter=counter, model=model, tools=SandboxTools(toolbox, policy), acl=acl_of(policy),
                journal=journal if observer is None else ObservedJournal(journal, observer),
                cost_of=lambda envelope: call_cost(envelope, price), cancel=cancel, on_turn=progress,
            )
            patches = PatchRecorder(sandbox, toolbox, recorder, run_id)
            result = agent.run(before_verdict=patches.record)
    return result, patches.patch


def applied_outcome(wiring: Wiring, request: RunRequest, run_id: str, result: RunResult, patch: Patch) -> RunOutcome:
    """The outcome, the patch written to the repo first when ``--apply`` asked
    and the verdict allows it (a SUSPECT one only with ``--accept-suspect``)."""
    applied, refused = False, None
    if request.apply and result.verdict is Verdict.SUSPECT and not request.accept_suspect and not patch.empty:
        refused = suspect_refusal(result)
    elif request.apply and result.verdict in VERIFIED and not patch.empty:
        try:
            apply_patch(patch, wiring.repo, expected_sha256=result.patch_sha256 or "",
                        allow=wiring.policy.apply.allowed_reasons())
            applied = True
        except ApplyRefused as exc:
            refused = str(exc)
    return RunOutcome(run_id=run_id, result=result, patch=shown_text(patch.data), patch_bytes=patch.data,
                      patch_files=patch.files, applied=applied,
                      patch_sha256=patch.sha256, skipped=patch.skipped, flagged=patch.flagged,
                      apply_refused=refused)
