"""One live ``escrow run``: wire the components, run the agent, collect the patch.

Fails fast, before anything is recorded, on what the user can fix (repo,
policy, store, Docker daemon, image); once the run is recorded, every ending is
a verdict in the store.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from orchestrator.agent import VERIFIED, RunResult, Verdict
from orchestrator.canonical import shown_text
from orchestrator.context.tokenizer import TokenCounter
from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope
from orchestrator.launch.compose import (
    ModelProbe,
    make_spec,
    open_store,
    open_token_exact,
    resolve_constraint,
    resolve_policy,
    resolve_repo,
)
from orchestrator.launch.liveness import Heartbeat
from orchestrator.limits import Tally
from orchestrator.model_client.client import ModelClient
from orchestrator.model_client.reach import require_http_url, require_model
from orchestrator.model_client.token_exact import TokenExactClient
from orchestrator.observer import ObservedJournal, RunObserver
from orchestrator.perimeter import acl_of
from orchestrator.ports import Model
from orchestrator.runspec import build_agent
from orchestrator.settings import Settings
from orchestrator.toolset import tool_specs
from policies import Flag, Policy
from policies.price_table import load_price_table
from policies.pricing import call_cost
from sandbox import Patch, Sandbox, ToolBox, apply_patch, connect, require_image
from sandbox.errors import ApplyRefused, ExportRefused
from sandbox.export_stream import Skipped
from sandbox.loop_tools import SandboxTools
from sandbox.runtime import choose_runtime
from sandbox.workspace import patch_paths
from store import Recorder, RunJournal, Store
from store.liveness import LeaseClaim, is_open

Progress = Callable[[int, Envelope, Tally], None]


class RunRequest(Frozen):
    """What one run is asked to do: the task, the repository, the verifier."""

    task: str
    repo: Path
    verify: str
    apply: bool = False
    accept_suspect: bool = False  # --apply writes a SUSPECT patch too (else it is refused with its reasons)
    hidden: tuple[str, ...] = ()  # added to the policy's [verify] hidden (a batch task's own)
    verify_patch: str | None = None  # applied after the model's patch, in the verifier's container only
    required_tests: tuple[str, ...] = ()  # a PASS needs each seen passing (SWE-bench's FAIL_TO_PASS, PASS_TO_PASS)
    workspace_sha256: str | None = None  # ``repo`` is a kept workspace of this digest (a batch's): replays check it
    batch: dict[str, str] | None = None
    """A batch attempt's run: its batch and task (``store.batches.batch_note``),
    recorded in its config, against which ``report --by batch`` checks the batch tables."""


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


def run_log() -> structlog.typing.FilteringBoundLogger:
    """The run's logger. A library never writes logs to its caller's stdout:
    the CLI configures structlog (stderr); a Python caller that has not gets
    stderr too, where structlog's default would print to stdout."""
    if structlog.is_configured():
        return structlog.get_logger("escrow.run")
    return structlog.wrap_logger(
        structlog.PrintLogger(file=sys.stderr),
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)])


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


def with_task_inputs(policy: Policy, request: RunRequest) -> Policy:
    """The policy with the task's own verifier inputs: its hidden globs, and
    the paths its verifier patch touches protected (the model's version of a
    reference test file is never what the verifier runs)."""
    if not request.hidden and not request.verify_patch:
        return policy
    verify = policy.verify
    protect = verify.protect + (patch_paths(request.verify_patch) if request.verify_patch else ())
    return policy.model_copy(update={"verify": verify.model_copy(
        update={"hidden": verify.hidden + request.hidden, "protect": protect})})


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
    settings: Settings, request: RunRequest, *, progress: Progress | None = None,
    cancel: threading.Event | None = None, observer: RunObserver | None = None,
    on_start: Callable[[str], None] | None = None, lease: LeaseClaim | None = None,
    start_sandbox: Callable[..., Sandbox] = Sandbox.start,
    around_model: Callable[[Model, TokenCounter], tuple[Model, TokenCounter]] = lambda m, c: (m, c),
) -> RunOutcome:
    """Run the agent once. Raises typed errors (ConfigError, SandboxError,
    StoreError) for what fails before the run is recorded; after that every
    ending is a recorded verdict. ``lease`` is taken with the run's creation,
    and ``on_start`` called with its id (a batch's lease and heartbeat).
    ``start_sandbox`` stands in for ``Sandbox.start`` (a batch bounds it with
    its start deadline);
    ``around_model`` wraps the model client and the token counter (a batch
    holds their requests to a replica's slot count)."""
    task, repo, verifier, apply = request.task, request.repo, request.verify, request.apply
    repo_path = resolve_repo(repo)
    policy = with_task_inputs(resolve_policy(settings), request)
    require_http_url(settings.model_url)  # before a sandbox starts or a run is recorded
    settings = settings.model_copy(update={"model": require_model(settings.model_url, settings.model)})
    # --token-exact: the engine and its template are checked before anything starts or is recorded.
    token_model = open_token_exact(settings) if settings.token_exact else None
    docker_client = connect(settings.docker_host)
    require_image(docker_client, settings.sandbox_image)
    runtime = choose_runtime(docker_client, settings.sandbox_runtime)
    run_log().info("sandbox runtime", runtime=runtime.name, why=runtime.why)
    price = load_price_table(settings.home).lookup(settings.model_name)
    if price is None:
        run_log().warning(
            "model has no price; its calls cost $0", model=settings.model_name, hint="escrow price set MODEL ...")
    store = open_store(settings)
    probe = ModelProbe(settings)
    cancel = cancel or threading.Event()
    # Every run holds a lease from its first row: a batch brings its own
    # (with its heartbeat, ``on_start``); any other run renews one here.
    heartbeat = Heartbeat(store, settings.lease_s) if lease is None else None
    try:
        recorder = Recorder(store)
        specs = tool_specs(policy.tools.allowed)
        choice = resolve_constraint(settings, policy, specs, probe)
        run_log().info("constrain", wanted=choice.wanted,
                       used=choice.constraint.kind if choice.constraint else "off", why=choice.why,
                       loosened=len(choice.constraint.loosened) if choice.constraint else 0)
        spec = make_spec(
            settings, policy, task=task, verifier=verifier, tool_specs=specs, probe=probe,
            verifier_patch=request.verify_patch, required_tests=request.required_tests, constraint=choice.constraint,
        )
        run_id = recorder.start_run(
            task=task, repo=str(repo_path), model=settings.model_name, policy=policy.model_dump(mode="json"),
            config={"spec": spec.model_dump(mode="json"), "model_url": settings.model_url,
                    "sandbox_image": settings.sandbox_image, "sandbox_runtime": runtime.name,
                    **({"workspace_sha256": request.workspace_sha256} if request.workspace_sha256 else {}),
                    **({"batch": request.batch} if request.batch else {})},
            lease=lease if heartbeat is None else heartbeat.claim(),
        )
        if heartbeat is not None:
            heartbeat.started(run_id)
        journal = RunJournal(recorder, run_id)
        observed = journal if observer is None else ObservedJournal(journal, observer)
        if on_start is not None:  # e.g. a batch starts renewing the run's lease
            on_start(run_id)
        structlog.contextvars.bind_contextvars(run_id=run_id)
        # From here on every ending is a recorded verdict: Ctrl-C only sets
        # ``cancel``, also while the sandbox starts, and the run ends CANCELED.
        with sigint_cancels(cancel):
            try:
                sandbox = start_sandbox(docker_client, settings.sandbox_image, policy, repo_path, run_id=run_id,
                                        runtime=runtime.name)
            except BaseException as exc:
                verdict = Verdict.CANCELED if isinstance(exc, KeyboardInterrupt) else Verdict.INFRA_ERROR
                recorder.finish_run(run_id, verdict.value, f"sandbox did not start: {exc!r}")
                raise
            client: ModelClient | TokenExactClient = token_model or ModelClient(
                settings.model_url, api_key=settings.api_key, observer=observer)
            with sandbox, client:
                recorder.record_event(run_id, None, "engine", client.engine_info().model_dump(mode="json"))
                with verdict_on_failure(store, recorder, run_id):
                    toolbox = ToolBox(sandbox, policy, verifier_command=verifier, cancel=cancel,
                                      verifier_patch=request.verify_patch, required_tests=request.required_tests)
                    if early_verifier_wanted(settings, request):
                        toolbox.start_early()  # the first submit's pre-pass, while the agent works
                    tools = SandboxTools(toolbox, policy)
                    model, counter = around_model(client, probe.counter)
                    agent = build_agent(
                        spec, counter=counter, model=model, tools=tools, acl=acl_of(policy),
                        journal=observed,
                        cost_of=lambda envelope: call_cost(envelope, price), cancel=cancel, on_turn=progress,
                    )
                    patches = PatchRecorder(sandbox, toolbox, recorder, run_id)
                    result = agent.run(before_verdict=patches.record)
        patch = patches.patch
        applied, refused = False, None
        if apply and result.verdict is Verdict.SUSPECT and not request.accept_suspect and not patch.empty:
            refused = suspect_refusal(result)
        elif apply and result.verdict in VERIFIED and not patch.empty:
            try:
                apply_patch(patch, repo_path, expected_sha256=result.patch_sha256 or "",
                            allow=policy.apply.allowed_reasons())
                applied = True
            except ApplyRefused as exc:
                refused = str(exc)
        return RunOutcome(run_id=run_id, result=result, patch=shown_text(patch.data), patch_bytes=patch.data,
                          patch_files=patch.files, applied=applied,
                          patch_sha256=patch.sha256, skipped=patch.skipped, flagged=patch.flagged,
                          apply_refused=refused)
    finally:
        if heartbeat is not None:
            heartbeat.close()
        structlog.contextvars.unbind_contextvars("run_id")
        probe.close()
        store.close()
        if token_model is not None:
            token_model.close()
