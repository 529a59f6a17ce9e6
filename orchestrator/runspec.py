"""``RunSpec``: everything that determines a run's requests, in one frozen,
recordable object. A live run and its replay build the agent from the same
spec, which is what makes replay byte-identical.

Pure: the token counter, model, tools and journal arrive from outside.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import Field

from orchestrator.agent import Agent
from orchestrator.context import (
    Budget,
    CompactionPolicy,
    ContextAssembler,
    Margin,
    RecordingCounter,
    TailFormat,
    TiktokenCounter,
    TokenCounter,
)
from orchestrator.context.budget import WindowSource
from orchestrator.contract import Constraint, Frozen, Role, Sampling, ToolSpec
from orchestrator.envelope import Envelope
from orchestrator.limits import Tally
from orchestrator.perimeter import Approve, Decide, deny_all_asks
from orchestrator.ports import Journal, Model, Tools
from orchestrator.tool_protocols import protocol_named
from orchestrator.turn_context import RequestShape, TurnContext
from policies.model import RunLimits

SYSTEM_PROMPT = """You are a careful software engineer working in a sandboxed copy of a repository at /workspace.
Use the tools to inspect and change files and to run commands. Make the smallest change that solves the task.
When you believe the task is done, call submit: it runs the task's verifier, and only a passing verifier counts."""


class RunSpec(Frozen):
    task: str
    verifier: str | None = None
    verifier_patch: str | None = None  # applied in the verifier's container only, never shown to the model
    required_tests: tuple[str, ...] = ()  # the task's named tests; none: a pre-pass collects them (sandbox/toolbox.py)
    system: str = SYSTEM_PROMPT
    system_role: Role = "system"
    protocol: str = "native"
    tool_specs: tuple[ToolSpec, ...]
    model: str
    s_max: int
    k_max: int
    window_source: WindowSource = "config"
    deadline_s: float = 120.0
    max_payload_bytes: int = 1_000_000
    stop: tuple[str, ...] = ()
    sampling: Sampling = Sampling()
    stream: bool = True
    constraint: Constraint | None = None  # constrained decoding of tool calls (orchestrator.grammar)
    tokenizer: str = "cl100k_base"
    margin: Margin = Margin()
    compaction: CompactionPolicy = CompactionPolicy()
    limits: RunLimits = RunLimits()
    # The token-in loop (docs/TOKENS.md): its history only grows, so no
    # volatile tail is written. Left out of the JSON when off, so specs
    # recorded before it keep their bytes.
    token_exact: bool = Field(default=False, exclude_if=lambda value: not value)

    def task_message(self) -> str:
        if self.verifier:
            return f"{self.task}\n\nThe verifier that decides success is: {self.verifier}"
        return self.task


def build_agent(
    spec: RunSpec,
    *,
    counter: TokenCounter,
    model: Model,
    tools: Tools,
    acl: Decide,
    journal: Journal,
    cost_of: Callable[[Envelope], float] = lambda envelope: 0.0,
    approve: Approve = deny_all_asks,
    cancel: threading.Event | None = None,
    on_turn: Callable[[int, Envelope, Tally], None] | None = None,
) -> Agent:
    protocol = protocol_named(spec.protocol)
    # Local tiktoken counts are reproducible offline; anything else (a server's
    # tokenizer) is recorded so replay can serve the same numbers.
    recording = None if isinstance(counter, TiktokenCounter) else RecordingCounter(counter)
    addendum = protocol.system_addendum(spec.tool_specs)
    system = spec.system + ("\n\n" + addendum if addendum else "")
    context = ContextAssembler(
        system=system,
        task=spec.task_message(),
        tools=protocol.request_tools(spec.tool_specs),
        budget=Budget(s_max=spec.s_max, k_max=spec.k_max, source=spec.window_source),
        counter=recording or counter,
        margin=spec.margin,
        policy=spec.compaction,
        system_role=spec.system_role,
        tail=None if spec.token_exact else TailFormat(),
    )
    shape = RequestShape(
        model=spec.model,
        max_tokens=spec.k_max,
        deadline_s=spec.deadline_s,
        max_payload_bytes=spec.max_payload_bytes,
        stop=spec.stop,
        sampling=spec.sampling,
        stream=spec.stream,
        constraint=spec.constraint,
    )
    return Agent(
        model=model,
        tools=tools,
        acl=acl,
        context=TurnContext(context, shape, recording),
        journal=journal,
        limits=spec.limits,
        protocol=protocol,
        cost_of=cost_of,
        approve=approve,
        cancel=cancel,
        on_turn=on_turn,
    )
