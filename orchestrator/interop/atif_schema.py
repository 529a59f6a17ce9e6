"""The Agent Trajectory Interchange Format (ATIF) as frozen models, written
from Harbor's RFC 0001 (schema versions ATIF-v1.0 to ATIF-v1.6). Unknown
fields are refused, as the RFC's reference models do; validation is what
the ATIF export is checked against."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SchemaVersion = Literal["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6"]
SCHEMA_VERSIONS: tuple[str, ...] = get_args(SchemaVersion)
LATEST = SCHEMA_VERSIONS[-1]
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ImageSource(Strict):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


class ContentPart(Strict):
    type: Literal["text", "image"]
    text: str | None = None
    source: ImageSource | None = None


class SubagentTrajectoryRef(Strict):
    session_id: str
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None


class ObservationResult(Strict):
    source_call_id: str | None = None
    content: str | list[ContentPart] | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None


class Observation(Strict):
    results: list[ObservationResult]


class ToolCall(Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]


class Metrics(Strict):
    """``prompt_tokens`` include ``cached_tokens``."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Agent(Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class Step(Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[ContentPart]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def iso_8601(cls, value: str | None) -> str | None:
        # Python 3.11+ fromisoformat reads ISO 8601 with a "Z" suffix as UTC.
        if value is not None:
            datetime.fromisoformat(value)
        return value

    @model_validator(mode="after")
    def agent_only(self) -> "Step":
        misplaced = self.source != "agent" and [f for f in AGENT_ONLY if getattr(self, f) is not None]
        if misplaced:
            fields = ", ".join(misplaced)
            raise ValueError(f"step {self.step_id} is a {self.source} step; {fields} belong to agent steps")
        return self


class Trajectory(Strict):
    schema_version: SchemaVersion
    session_id: str
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def sequential_and_linked(self) -> "Trajectory":
        for i, step in enumerate(self.steps, start=1):
            if step.step_id != i:
                raise ValueError(f"step ids run 1, 2, 3... in order (not sequential): step {i} has id {step.step_id}")
            ids = {c.tool_call_id for c in step.tool_calls or ()}
            for result in step.observation.results if step.observation else ():
                if result.source_call_id is not None and result.source_call_id not in ids:
                    raise ValueError(
                        f"step {step.step_id}: observation refers to unknown tool call {result.source_call_id!r}"
                    )
        return self
