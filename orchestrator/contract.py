"""The request side of the model-invocation contract.

A ModelRequest is frozen and fully describes one call: what is sent (model,
messages, tools, stop sequences, sampling) and the host-side limits that are
never sent (T_max deadline, M_max staging bytes). Its canonical JSON and
sha256 identify it for the store and for replay.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from orchestrator.canonical import canonical_json, sha256_hex
from orchestrator.errors import ContractError


class Frozen(BaseModel):
    """Base for Escrow's own boundary models: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Captured(Frozen):
    """One stream of a command, capped where it was captured (a head and a
    tail kept) but sized and hashed whole: what the model, the store and the
    screen see of it."""

    head: str
    tail: str = ""
    total_bytes: int
    sha256: str
    truncated: bool = False

    def text(self) -> str:
        """The kept text; a cut stream says how much was left out, the one
        way it reads live, in the store and in ``show``."""
        if not self.truncated:
            return self.head
        omitted = self.total_bytes - len(self.head.encode()) - len(self.tail.encode())
        return f"{self.head}\n[... {max(omitted, 0)} bytes omitted of {self.total_bytes} ...]\n{self.tail}"


Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(Frozen):
    """One tool call as the model proposed it. ``arguments`` is raw text: it is
    only parsed inside the verification perimeter."""

    id: str
    name: str
    arguments: str


class Message(Frozen):
    """One chat message as sent on the wire (a tool result carries its
    ``tool_call_id``)."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


class ToolSpec(Frozen):
    """A tool offered to the model, in OpenAI function form."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ReservedWireKey(ContractError):
    """``Sampling.extra`` names a key the request sets itself (K_max, model,
    stream...): sending it would make the recorded request lie about its call."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__(
            f"Sampling.extra may not set {', '.join(repr(k) for k in keys)}: the request sets "
            "these itself; use the request's or the sampling's own field",
            keys=keys,
        )
        self.keys = keys


# Keys the request or Sampling's typed fields own. K_max has aliases on some
# engines (``max_completion_tokens``, llama.cpp's ``n_predict``), ``n`` > 1
# would ask for several answers where one envelope holds one, and a grammar
# sent through ``extra`` would constrain a call its record calls unconstrained.
RESERVED_WIRE_KEYS = frozenset({
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n_predict", "n",
    "stream", "stream_options", "tools", "tool_choice", "functions", "function_call", "stop",
    "response_format", "temperature", "top_p", "top_k", "seed", "logprobs", "top_logprobs",
    # Constrained decoding: set by ModelRequest.constraint, in each engine's dialect.
    "grammar", "grammar_lazy", "grammar_triggers", "json_schema", "ebnf", "regex", "structured_outputs",
    "guided_grammar", "guided_json", "guided_regex", "guided_choice",
})


def _check_extra(extra: dict[str, Any]) -> None:
    clash = sorted(RESERVED_WIRE_KEYS.intersection(extra))
    if clash:
        raise ReservedWireKey(clash)


class Sampling(Frozen):
    """Sampling settings. ``extra`` carries engine-specific fields verbatim
    (e.g. vLLM's ``min_p`` or ``repetition_penalty``) so they are recorded too;
    it may not set a key in ``RESERVED_WIRE_KEYS`` (``ReservedWireKey``)."""

    temperature: float | None = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("extra")
    @classmethod
    def _no_reserved_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        # ReservedWireKey is no ValueError, so pydantic lets it through as is.
        _check_extra(value)
        return value

    def to_wire(self) -> dict[str, Any]:
        # Checked again here: model_copy and model_construct skip validation.
        _check_extra(self.extra)
        out: dict[str, Any] = {}
        for key in ("temperature", "top_p", "top_k", "seed", "top_logprobs"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.logprobs:
            out["logprobs"] = True
        for key, value in self.extra.items():
            out[key] = value
        return out


class Constraint(Frozen):
    """Constrained decoding asked of the engine for one request: ``fields``
    are the engine's own request fields (a grammar in its dialect, or
    ``tool_choice``), sent verbatim and recorded with the request.
    ``kind`` is ``grammar`` (the text protocol's tool-call grammar) or
    ``tool_choice`` (native calls); ``loosened`` names the schema features
    the grammar describes more loosely than the schema (orchestrator.grammar)."""

    kind: Literal["grammar", "tool_choice"]
    engine: str
    fields: dict[str, Any]
    loosened: tuple[str, ...] = ()


class ModelRequest(Frozen):
    """One model call. K_max = ``max_tokens``, T_max = ``deadline_s``,
    M_max = ``max_payload_bytes``."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = Field(gt=0)
    deadline_s: float = Field(default=120.0, gt=0)
    max_payload_bytes: int = Field(default=1_000_000, gt=0)
    stop: tuple[str, ...] = ()
    sampling: Sampling = Sampling()
    stream: bool = True
    response_format: dict[str, Any] | None = None
    tool_choice: str | None = None
    constraint: Constraint | None = None

    @field_validator("messages")
    @classmethod
    def _non_empty(cls, value: tuple[Message, ...]) -> tuple[Message, ...]:
        if not value:
            raise ValueError("a request needs at least one message")
        return value

    def wire_body(self) -> dict[str, Any]:
        """The JSON body sent to ``/v1/chat/completions``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_wire() for m in self.messages],
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        }
        if self.stream:
            # Servers that support it send usage in a final chunk; others ignore it.
            body["stream_options"] = {"include_usage": True}
        if self.tools:
            body["tools"] = [t.to_wire() for t in self.tools]
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.stop:
            body["stop"] = list(self.stop)
        if self.response_format is not None:
            body["response_format"] = self.response_format
        body.update(self.sampling.to_wire())
        if self.constraint is not None:
            clash = sorted(set(self.constraint.fields).intersection(body))
            if clash:
                raise ContractError(
                    f"the constraint's fields {clash} are already set by the request", keys=clash)
            body.update(self.constraint.fields)
        return body

    @model_serializer(mode="wrap")
    def _without_absent_constraint(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An unconstrained request dumps without a ``constraint`` key, as
        # before the field existed: runs recorded then hash and replay the same.
        data: dict[str, Any] = handler(self)
        if data.get("constraint", 0) is None:
            del data["constraint"]
        return data

    def canonical(self) -> str:
        """Canonical JSON of the whole request, host-side limits included."""
        return canonical_json(self.model_dump(mode="json"))

    def sha256(self) -> str:
        return sha256_hex(self.canonical())
