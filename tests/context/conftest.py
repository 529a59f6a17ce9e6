"""Fixtures for the context tests: one offline tokenizer per session, and a
small builder for contexts with a chosen window."""

from __future__ import annotations

import pytest

from orchestrator.context import Budget, CompactionPolicy, ContextAssembler, Margin, TiktokenCounter
from orchestrator.contract import ToolSpec

TOOLS = (
    ToolSpec(
        name="read_file",
        description="Read a file of the workspace.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSpec(
        name="bash",
        description="Run a shell command in the sandbox.",
        parameters={"type": "object", "required": ["cmd"], "properties": {"cmd": {"type": "string"}}},
    ),
)


@pytest.fixture(scope="session")
def counter() -> TiktokenCounter:
    return TiktokenCounter("cl100k_base")


@pytest.fixture
def make_context(counter):
    def build(s_max: int = 4096, k_max: int = 256, *, system: str = "You are a careful coding agent.",
              task: str = "Make the failing test pass.", policy: CompactionPolicy | None = None,
              margin: Margin | None = None, tokenizer=None, **kwargs) -> ContextAssembler:
        return ContextAssembler(
            system=system, task=task, tools=TOOLS, budget=Budget(s_max=s_max, k_max=k_max),
            counter=tokenizer or counter, policy=policy, margin=margin, **kwargs,
        )

    return build
