"""In-memory ports for driving the real ``Agent`` in process: a scripted Model,
Tools over a dict of files with the real ACL (the loop's ``acl_of``), and a
Journal that keeps every record. The Context is the real one, built by
``orchestrator.runspec.build_agent``. No HTTP, no Docker, no database.

Each fake is checked against its Protocol by mypy: ``build`` passes them where
the ports are declared, and ``_ports`` below returns them as the Protocol types.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from orchestrator.agent import Agent
from orchestrator.candidate import CandidateState, Transition
from orchestrator.context import CompactionPolicy, Margin
from orchestrator.context.tokenizer import FunctionCounter
from orchestrator.contract import Message, ModelRequest, ToolCall, ToolSpec
from orchestrator.envelope import Envelope, ErrorDetail, FigureSource, Payload, Status, Usage
from orchestrator.perimeter import Approve, Decide, acl_of, deny_all_asks
from orchestrator.ports import DecisionLike, Journal, Model, ToolOutcome, Tools
from orchestrator.runspec import RunSpec, build_agent
from orchestrator.suspect import SuspectReason
from orchestrator.toolset import TOOLS, ReadFileArgs, SubmitArgs, ToolArgs, WriteFileArgs
from policies import Policy, RunLimits

# --- tool argument models: the same shape as sandbox.tools, without Docker --------------------


# The real tool declarations (orchestrator.toolset), four of them offered.
ARG_MODELS: dict[str, type[ToolArgs]] = {name: TOOLS[name] for name in ("bash", "read_file", "write_file", "submit")}


def specs() -> tuple[ToolSpec, ...]:
    return tuple(
        ToolSpec(name=name, description=f"the {name} tool", parameters=model.model_json_schema())
        for name, model in ARG_MODELS.items()
    )


# --- envelopes ---------------------------------------------------------------------------------


def call(name: str, arguments: str | Mapping[str, Any], call_id: str = "") -> ToolCall:
    """A tool call; ``arguments`` raw text is kept as is (for parse attacks)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id, name=name, arguments=text)


def envelope(
    status: Status = Status.COMPLETED,
    *calls: ToolCall,
    text: str = "",
    refusal: str | None = None,
    error: str | None = None,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    server_usage: bool = False,
) -> Envelope:
    source: FigureSource = "server" if server_usage else "estimated"
    return Envelope(
        status=status,
        payload=Payload(text=text, tool_calls=calls, refusal=refusal),
        error=ErrorDetail(kind=status.value.lower(), message=error) if error else None,
        usage=Usage(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            prompt_source=source, completion_source=source,
        ),
    )


def completed(*calls: ToolCall, text: str = "", **usage: Any) -> Envelope:
    return envelope(Status.COMPLETED, *calls, text=text, **usage)


Step = Envelope | Callable[[ModelRequest], Envelope]


class ScriptedModel:
    """Answers each call with the next scripted envelope (or the envelope a
    step function makes of the request); keeps every request it was sent."""

    def __init__(self, script: Iterable[Step]) -> None:
        self.script = list(script)
        self.requests: list[ModelRequest] = []

    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope:
        self.requests.append(request)
        if not self.script:
            raise AssertionError(f"the model was called {len(self.requests)} times; the script has fewer answers")
        step = self.script.pop(0)
        return step(request) if callable(step) else step


# --- tools -------------------------------------------------------------------------------------


class MemoryTools:
    """The Tools port over a dict of files; the ACL is the loop's (``acl_of``),
    each decision it makes kept in ``decided``.
    ``submit`` passes when ``verifier(files)`` is true."""

    def __init__(
        self,
        policy: Policy,
        files: Mapping[str, str] | None = None,
        verifier: Callable[[Mapping[str, str]], bool] = lambda files: False,
        bash_output: str = "ok",
        broken: Exception | None = None,
        suspect: tuple[SuspectReason, ...] = (),
    ) -> None:
        self.policy = policy
        self.suspect = suspect  # a passing submit's reasons for SUSPECT (what the sandbox's scan would find)
        self.broken = broken  # raised by every execute: a sandbox that died under the run
        self.files = dict(files or {})
        self.verifier = verifier
        self.bash_output = bash_output
        self.executed: list[tuple[str, BaseModel]] = []
        self.decided: list[tuple[str, DecisionLike]] = []

    def specs(self) -> tuple[ToolSpec, ...]:
        return specs()

    def arg_models(self) -> Mapping[str, type[BaseModel]]:
        return ARG_MODELS

    def acl(self) -> Decide:
        """The loop's ACL under this policy, recording what it decides."""
        acl = acl_of(self.policy)

        def decide_call(name: str, args: BaseModel) -> DecisionLike:
            decision = acl(name, args)
            self.decided.append((name, decision))
            return decision

        return decide_call

    def execute(self, name: str, args: BaseModel, *, time_left_s: float | None = None) -> ToolOutcome:
        self.executed.append((name, args))
        if self.broken is not None:
            raise self.broken
        if isinstance(args, ReadFileArgs):
            text = self.files.get(args.path)
            if text is None:
                return ToolOutcome(observation=f"no such file: {args.path}", ok=False)
            return ToolOutcome(observation=text, ok=True)
        if isinstance(args, WriteFileArgs):
            self.files[args.path] = args.content
            return ToolOutcome(observation=f"wrote {args.path}", ok=True)
        if isinstance(args, SubmitArgs):
            passed = self.verifier(self.files)
            return ToolOutcome(observation=f"verifier {'passed' if passed else 'failed'}", ok=passed,
                               exit_code=0 if passed else 1, verifier_passed=passed,
                               suspect=self.suspect if passed else ())
        return ToolOutcome(observation=self.bash_output, ok=True, exit_code=0)


# --- journal -----------------------------------------------------------------------------------


@dataclass
class CandidateRecord:
    turn: int
    call_ref: int
    index: int
    call: ToolCall
    transitions: list[Transition] = field(default_factory=list)
    tool: tuple[str, BaseModel | None, DecisionLike | None, ToolOutcome] | None = None

    @property
    def states(self) -> list[CandidateState]:
        return [t.to_state for t in self.transitions]

    @property
    def layer(self) -> str | None:
        return self.transitions[-1].layer if self.transitions else None


@dataclass
class MemoryJournal:
    """Every record the loop writes, in order; ``log`` keeps the order across kinds."""

    requests: list[tuple[int, ModelRequest]] = field(default_factory=list)
    envelopes: list[tuple[int, Envelope, float]] = field(default_factory=list)
    candidates: list[CandidateRecord] = field(default_factory=list)
    events: list[tuple[int | None, str, dict[str, Any]]] = field(default_factory=list)
    turns: list[tuple[int, tuple[Message, ...]]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def request(self, turn: int, request: ModelRequest) -> int:
        self.requests.append((turn, request))
        self.log.append(f"request {turn}")
        return len(self.requests) - 1

    def envelope(self, turn: int, call_ref: Any, envelope: Envelope, cost_usd: float) -> None:
        assert call_ref == len(self.requests) - 1, "an envelope must follow its own request"
        self.envelopes.append((turn, envelope, cost_usd))
        self.log.append(f"envelope {turn}")

    def candidate(self, turn: int, call_ref: Any, index: int, call: ToolCall) -> int:
        self.candidates.append(CandidateRecord(turn=turn, call_ref=call_ref, index=index, call=call))
        self.log.append(f"candidate {turn}.{index}")
        return len(self.candidates) - 1

    def transition(self, candidate_ref: Any, transition: Transition) -> None:
        self.candidates[candidate_ref].transitions.append(transition)
        self.log.append(f"transition {transition.to_state.value}")

    def tool(
        self, candidate_ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None, outcome: ToolOutcome
    ) -> None:
        record = self.candidates[candidate_ref]
        assert record.tool is None, "one tool record per candidate"
        record.tool = (name, args, decision, outcome)
        self.log.append(f"tool {name}")

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None:
        self.events.append((turn, kind, data))
        self.log.append(f"event {kind}")

    def end_turn(self, turn: int, appended: tuple[Message, ...]) -> None:
        self.turns.append((turn, appended))
        self.log.append(f"end_turn {turn}")

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [data for _, k, data in self.events if k == kind]

    @property
    def verdict(self) -> dict[str, Any]:
        verdicts = self.of_kind("verdict")
        assert len(verdicts) == 1, f"expected one verdict, got {verdicts}"
        return verdicts[0]


# --- composition -------------------------------------------------------------------------------


def words(text: str) -> int:
    """A deterministic token count: one token per 4 characters, rounded up."""
    return (len(text) + 3) // 4


@dataclass
class Loop:
    agent: Agent
    model: ScriptedModel
    tools: MemoryTools
    journal: MemoryJournal


def build(
    script: Iterable[Step],
    *,
    policy: Policy,
    limits: RunLimits | None = None,
    s_max: int = 8192,
    k_max: int = 256,
    protocol: str = "native",
    compaction: CompactionPolicy = CompactionPolicy(),
    cost_of: Callable[[Envelope], float] = lambda envelope: 0.0,
    approve: Approve = deny_all_asks,
    cancel: threading.Event | None = None,
    tools: MemoryTools | None = None,
) -> Loop:
    """The real Agent and Context, composed by ``build_agent`` as a live run is."""
    model = ScriptedModel(script)
    tools = tools or MemoryTools(policy)
    journal = MemoryJournal()
    spec = RunSpec(
        task="make the tests pass",
        verifier="pytest -q",
        protocol=protocol,
        tool_specs=tools.specs(),
        model="fake-model",
        s_max=s_max,
        k_max=k_max,
        margin=Margin(ratio=0.0, fixed=0),
        compaction=compaction,
        limits=limits or policy.limits,
    )
    agent = build_agent(
        spec,
        counter=FunctionCounter(words, name="chars/4"),
        model=model,
        tools=tools,
        acl=tools.acl(),
        journal=journal,
        cost_of=cost_of,
        approve=approve,
        cancel=cancel,
    )
    return Loop(agent=agent, model=model, tools=tools, journal=journal)


def _ports(policy: Policy) -> tuple[Model, Tools, Journal]:
    """Never called: mypy checks here that each fake satisfies its Protocol."""
    return ScriptedModel([]), MemoryTools(policy), MemoryJournal()
