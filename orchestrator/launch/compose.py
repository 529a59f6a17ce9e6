"""The composition root: Settings (and flags) in, wired components out.

Everything that touches the outside world is created here and nowhere else:
the store, the HTTP client, the Docker sandbox, the tokenizer probe.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import httpx

from orchestrator.canonical import sha256_hex
from orchestrator.context import resolve_budget
from orchestrator.contract import Constraint, Frozen, Role, Sampling, ToolSpec
from orchestrator.errors import ConfigError
from orchestrator.grammar import GrammarRefused, ToolGrammar, tool_grammar
from orchestrator.model_client.engines import constrains, constraint_for, slow_to_constrain
from orchestrator.model_client.provenance import EngineInfo
from orchestrator.model_client.provenance import probe as probe_engine
from orchestrator.model_client.server_tokenizer import counter_for, discover_context_window
from orchestrator.model_client.token_exact import TokenExactClient
from orchestrator.runspec import RunSpec
from orchestrator.settings import Settings
from orchestrator.tool_protocols import protocol_named
from policies import Policy, default_policy, load_policy
from store import Store
from store.engine import parse_url, sqlite_path


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
        # (orchestrator/model_client/token_exact.py): the requests say so.
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
