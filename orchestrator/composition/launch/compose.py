"""The composition root: Settings (and flags) in, wired components out.

Everything that touches the outside world is created here and nowhere else:
the store, the HTTP client, the Docker sandbox, the tokenizer probe.
``wire`` builds a run's parts once, checked before anything is recorded;
``session.run_agent`` runs them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import docker
import httpx
import structlog

from orchestrator.adapters.model_client.engines import constrains, constraint_for, slow_to_constrain
from orchestrator.adapters.model_client.provenance import EngineInfo
from orchestrator.adapters.model_client.provenance import probe as probe_engine
from orchestrator.adapters.model_client.reach import ModelUrl, require_model
from orchestrator.adapters.model_client.server_tokenizer import counter_for, discover_context_window
from orchestrator.adapters.model_client.token_exact import TokenExactClient
from orchestrator.canonical import sha256_hex
from orchestrator.context import resolve_budget
from orchestrator.contract import Constraint, Frozen, Role, Sampling, ToolSpec
from orchestrator.errors import ConfigError
from orchestrator.grammar import GrammarRefused, ToolGrammar, tool_grammar
from orchestrator.runspec import RunSpec
from orchestrator.settings import Settings
from orchestrator.tool_protocols import protocol_named
from orchestrator.toolset import tool_specs as tool_specs_of
from policies import Policy, default_policy, load_policy
from policies.price_table import load_price_table
from policies.pricing import Price
from sandbox import connect, require_image
from sandbox.runtime import RuntimeChoice, choose_runtime
from sandbox.workspace import patch_paths
from store import Store
from store.engine import parse_url, sqlite_path


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
    """A batch attempt's run: its batch and task (``store.write.batches.batch_note``),
    recorded in its config, against which ``report --by batch`` checks the batch tables."""


def run_log() -> structlog.typing.FilteringBoundLogger:
    """The run's logger. A library never writes logs to its caller's stdout:
    the CLI configures structlog (stderr); a Python caller that has not gets
    stderr too, where structlog's default would print to stdout."""
    if structlog.is_configured():
        return structlog.get_logger("escrow.run")
    return structlog.wrap_logger(
        structlog.PrintLogger(file=sys.stderr),
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)])


def open_store(settings: Settings, *, readonly: bool = False, create: bool = True) -> Store:
    return Store.open(settings.store_url, readonly=readonly, create=create and not readonly)


def _require_text_protocol(settings: Settings) -> None:
    if settings.tool_protocol != "text":
        raise ConfigError(
            f"--token-exact reads tool calls from the sampled text, which the {settings.tool_protocol!r} tool "
            "protocol does not: use --tool-protocol text", tool_protocol=settings.tool_protocol)


def require_token_exact(settings: Settings, urls: Sequence[str]) -> None:
    """A batch's ``--token-exact`` checked once, before the batch is recorded:
    the tool protocol, and each replica's engine and template as a run
    checks them. A ``{task_id}`` URL names no one server: left to each run."""
    _require_text_protocol(settings)
    for url in urls:
        if "{" not in url:
            open_token_exact(settings.model_copy(update={"model_url": url})).close()


def open_token_exact(settings: Settings) -> TokenExactClient:
    """The token-in loop's model client, its engine and template checked
    (``TokenExactUnsupported``, ``TemplateNotPrefixPreserving``) before a
    sandbox starts or a run is recorded."""
    _require_text_protocol(settings)
    client = TokenExactClient(settings.model_url, model=settings.model)
    try:
        # The loop appends user messages after an answer: the text
        # protocol's tool results and the loop's notices.
        client.prepare(roles=("user",))
    except BaseException:
        client.close()
        raise
    return client


def kept_workspaces(settings: Settings) -> Path:
    """Where a store's batch runs keep their starting workspaces
    (``sandbox.kept``), one place a store, so that a store's ``escrow gc``
    frees only its own: ``FILE.workspaces`` beside a SQLite store's file;
    for any other store, a folder of the home named after its URL."""
    url = parse_url(settings.store_url)
    path = sqlite_path(url)
    if path is not None:
        return path.with_name(f"{path.name}.workspaces")
    named = sha256_hex(url.render_as_string(hide_password=True))[:16]
    return settings.home / "workspaces" / f"{url.get_backend_name()}-{named}"


def resolve_policy(settings: Settings) -> Policy:
    policy = load_policy(settings.policy) if settings.policy else default_policy()
    limits = policy.limits
    updates: dict[str, float] = {}
    if settings.max_turns is not None:
        updates["max_turns"] = settings.max_turns
    if settings.budget_usd is not None:
        updates["max_cost_usd"] = settings.budget_usd
    if updates:
        policy = policy.model_copy(update={"limits": limits.model_copy(update=updates)})
    return policy


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


def resolve_repo(repo: Path) -> Path:
    try:
        path = repo.expanduser().resolve()
    except OSError as exc:  # e.g. "." when the working directory was deleted
        raise ConfigError(f"--repo {repo}: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise ConfigError(f"--repo {repo} is not a directory")
    return path


ENGINE_PROBE_S = 15.0


class ModelProbe:
    """What the server says about itself: its tokenizer, its window and (when
    a constraint may be sent) its engine. Holds the HTTP client a server
    tokenizer counts through, for the run's life."""

    def __init__(self, settings: Settings) -> None:
        self.http = httpx.Client(timeout=30.0)
        self._url = settings.model_url
        self._engine: EngineInfo | None = None
        self.counter = counter_for(
            settings.tokenizer, base_url=settings.model_url, model=settings.model_name, http=self.http
        )
        try:
            self.window = discover_context_window(settings.model_url, model=settings.model_name, http=self.http)
        except httpx.HTTPError:
            self.window = None

    @property
    def engine(self) -> EngineInfo:
        if self._engine is None:
            # Longer than a run's own probe: a one-slot server (llama-cpp-python)
            # answers /v1/models only between completions, and a missed
            # answer would turn ``auto`` off.
            self._engine = probe_engine(self._url, self.http, timeout_s=ENGINE_PROBE_S)
        return self._engine

    def close(self) -> None:
        self.http.close()


class ConstraintChoice(Frozen):
    """What ``--constrain`` came to for a run, and why, said once at its start."""

    wanted: str
    constraint: Constraint | None
    why: str


def resolve_constraint(
    settings: Settings, policy: Policy, tool_specs: tuple[ToolSpec, ...], probe: ModelProbe,
) -> ConstraintChoice:
    """``settings.constrain`` (else the policy's ``tools.constrain``) against
    what the engine probe found. ``tools`` where it cannot be done is a
    ConfigError; ``auto`` then runs unconstrained and says why."""
    wanted = settings.constrain or policy.tools.constrain
    if wanted == "off":
        return ConstraintChoice(wanted=wanted, constraint=None, why="asked")
    protocol = settings.tool_protocol
    engine = probe.engine
    if wanted == "auto" and (slow := slow_to_constrain(engine.engine, protocol)) is not None:
        return ConstraintChoice(wanted=wanted, constraint=None, why=slow)
    if not constrains(engine.engine, protocol):
        why = (f"the engine ({engine.label}, {', '.join(engine.evidence) or 'no evidence'}) has no "
               f"constrained decoding Escrow knows for the {protocol} protocol")
        if wanted == "tools":
            raise ConfigError(f"--constrain tools: {why}; use --constrain off", engine=engine.engine)
        return ConstraintChoice(wanted=wanted, constraint=None, why=why)
    grammar: ToolGrammar | None = None
    if protocol == "text":
        try:
            grammar = tool_grammar(tool_specs)
        except GrammarRefused as exc:
            if wanted == "tools":
                raise ConfigError(f"--constrain tools: {exc}") from None
            return ConstraintChoice(wanted=wanted, constraint=None, why=str(exc))
    constraint = constraint_for(engine.engine, engine.version, protocol, grammar.text if grammar else None,
                                grammar.loosened if grammar else ())
    return ConstraintChoice(wanted=wanted, constraint=constraint, why=f"{engine.label} supports it")


def make_spec(
    settings: Settings, policy: Policy, *, task: str, verifier: str | None, tool_specs: tuple[ToolSpec, ...],
    probe: ModelProbe, verifier_patch: str | None = None, required_tests: tuple[str, ...] = (),
    constraint: Constraint | None = None,
) -> RunSpec:
    if settings.system_role not in ("system", "user"):
        raise ConfigError(f"system_role must be 'system' or 'user', not {settings.system_role!r}")
    budget = resolve_budget(
        configured=settings.context_window, discovered=probe.window, k_max=settings.max_output_tokens
    )
    role: Role = "user" if settings.system_role == "user" else "system"
    return RunSpec(
        task=task,
        verifier=verifier,
        verifier_patch=verifier_patch,
        required_tests=required_tests,
        system_role=role,
        protocol=settings.tool_protocol,
        tool_specs=tool_specs,
        model=settings.model_name,
        s_max=budget.s_max,
        k_max=budget.k_max,
        window_source=budget.source,
        deadline_s=settings.deadline_s,
        # The token-in loop sends no stop strings and does not stream
        # (orchestrator/adapters/model_client/token_exact.py): the requests say so.
        stop=() if settings.token_exact else protocol_named(settings.tool_protocol).stop,
        stream=settings.stream and not settings.token_exact,
        token_exact=settings.token_exact,
        constraint=constraint,
        sampling=sampling_of(settings),
        tokenizer=probe.counter.name,
        limits=policy.limits,
    )


def sampling_of(settings: Settings) -> Sampling:
    """Sampling from the settings; ``logprobs`` K asks for the top-K
    alternatives of every token, recorded for ``escrow parity`` and
    ``escrow export --tokens``."""
    return Sampling(temperature=settings.temperature, seed=settings.seed,
                    logprobs=settings.logprobs is not None, top_logprobs=settings.logprobs)


@dataclass(frozen=True)
class Wiring:
    """One run's parts, built once by ``wire`` and checked before anything is
    recorded. Closing it closes what it opened (the probe's HTTP client, the
    store, the token-in client)."""

    settings: Settings  # the model named (``reach.require_model``)
    model_url: ModelUrl
    repo: Path
    policy: Policy  # resolved once, with the task's verifier inputs
    spec: RunSpec
    docker: docker.DockerClient
    runtime: RuntimeChoice
    price: Price | None
    store: Store
    probe: ModelProbe
    token_model: TokenExactClient | None
    closing: ExitStack

    def close(self) -> None:
        self.closing.close()

    def __enter__(self) -> Wiring:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def wire(settings: Settings, request: RunRequest, model_url: ModelUrl | None = None) -> Wiring:
    """A run's parts, in the order its user-fixable failures are named: the
    repo, the policy, the model URL (``model_url`` when the command already
    parsed it) and model, the token-in engine, the Docker daemon and image,
    the store, the constraint. What fails closes what was opened."""
    repo = resolve_repo(request.repo)
    policy = with_task_inputs(resolve_policy(settings), request)
    url = model_url or ModelUrl.parse(settings.model_url)
    settings = settings.model_copy(update={"model": require_model(url.url, settings.model)})
    with ExitStack() as opened:
        # --token-exact: the engine and its template are checked before anything starts or is recorded.
        token_model = open_token_exact(settings) if settings.token_exact else None
        if token_model is not None:
            opened.callback(token_model.close)
        docker_client = connect(settings.docker_host)
        require_image(docker_client, settings.sandbox_image)
        runtime = choose_runtime(docker_client, settings.sandbox_runtime)
        run_log().info("sandbox runtime", runtime=runtime.name, why=runtime.why)
        price = load_price_table(settings.home).lookup(settings.model_name)
        if price is None:
            run_log().warning(
                "model has no price; its calls cost $0", model=settings.model_name, hint="escrow price set MODEL ...")
        store = open_store(settings)
        opened.callback(store.close)
        probe = ModelProbe(settings)
        opened.callback(probe.close)
        specs = tool_specs_of(policy.tools.allowed)
        choice = resolve_constraint(settings, policy, specs, probe)
        run_log().info("constrain", wanted=choice.wanted,
                       used=choice.constraint.kind if choice.constraint else "off", why=choice.why,
                       loosened=len(choice.constraint.loosened) if choice.constraint else 0)
        spec = make_spec(
            settings, policy, task=request.task, verifier=request.verify, tool_specs=specs, probe=probe,
            verifier_patch=request.verify_patch, required_tests=request.required_tests,
            constraint=choice.constraint,
        )
        return Wiring(settings=settings, model_url=url, repo=repo, policy=policy, spec=spec, docker=docker_client,
                      runtime=runtime, price=price, store=store, probe=probe, token_model=token_model,
                      closing=opened.pop_all())
