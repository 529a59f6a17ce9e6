"""How tool calls travel between model and loop, chosen per model in config.

- ``NativeProtocol``: OpenAI ``tools`` in the request, ``tool_calls`` in the
  reply, ``tool`` role observations.
- ``TextProtocol``: for servers or models without tool calling. Tools are
  described in the system prompt; the model writes ``<tool name="...">{json}</tool>``
  blocks and anchored search/replace blocks, which are parsed into the same
  ToolCall objects, so the perimeter and the sandbox see no difference.

Call ids are derived from the turn and position, never random, so replay
rebuilds identical requests.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from orchestrator.contract import Message, ToolCall, ToolSpec
from orchestrator.envelope import Payload
from orchestrator.ports import ToolOutcome


class ToolProtocol(Protocol):
    name: str
    stop: tuple[str, ...]

    def request_tools(self, specs: tuple[ToolSpec, ...]) -> tuple[ToolSpec, ...]: ...

    def system_addendum(self, specs: tuple[ToolSpec, ...]) -> str: ...

    def calls(self, payload: Payload, turn: int) -> tuple[ToolCall, ...]: ...

    def assistant_message(self, payload: Payload, calls: tuple[ToolCall, ...]) -> Message: ...

    def observation(self, call: ToolCall, outcome: ToolOutcome) -> Message: ...


class NativeProtocol:
    name = "native"
    stop: tuple[str, ...] = ()

    def request_tools(self, specs: tuple[ToolSpec, ...]) -> tuple[ToolSpec, ...]:
        return specs

    def system_addendum(self, specs: tuple[ToolSpec, ...]) -> str:
        return ""

    def calls(self, payload: Payload, turn: int) -> tuple[ToolCall, ...]:
        # Some servers omit ids; give those a deterministic one.
        return tuple(
            c if c.id else c.model_copy(update={"id": f"call_{turn}_{i}"}) for i, c in enumerate(payload.tool_calls)
        )

    def assistant_message(self, payload: Payload, calls: tuple[ToolCall, ...]) -> Message:
        return Message(role="assistant", content=payload.text or None, tool_calls=calls)

    def observation(self, call: ToolCall, outcome: ToolOutcome) -> Message:
        return Message(role="tool", tool_call_id=call.id, name=call.name, content=outcome.observation)


# The closing tag is also the stop sequence, which servers strip from the
# output: a block left open at the very end of the text is complete.
_TOOL_BLOCK = re.compile(r"<tool\s+name=\"([A-Za-z_][A-Za-z0-9_]*)\"\s*>(.*?)(?:</tool>|\Z)", re.S)
_EDIT_BLOCK = re.compile(
    r"^[ \t]*([^\n<>=]+?)[ \t]*\n<<<<<<< SEARCH\n(.*?)\n?=======\n(.*?)\n?>>>>>>> REPLACE", re.S | re.M
)


def _signature(schema: dict[str, Any]) -> str:
    """A compact argument list from a JSON schema: small models read it better
    than the schema itself, and it costs far fewer prompt tokens. Required
    first, then by name: never dict order, which the store's canonical JSON
    does not keep, so a replay renders the same text."""
    required = set(schema.get("required", ()))
    props = sorted(schema.get("properties", {}), key=lambda name: (name not in required, name))
    return ", ".join(name if name in required else f"{name}?" for name in props)


class TextProtocol:
    name = "text"
    # One tool call per answer: generation stops at the first closing tag, so a
    # small model cannot ramble past its call into the output limit.
    stop: tuple[str, ...] = ("</tool>",)

    def __init__(self, edit_tool: str = "edit_file", edit_fields: tuple[str, str, str] = ("path", "old", "new")):
        self.edit_tool = edit_tool
        self.edit_fields = edit_fields

    def request_tools(self, specs: tuple[ToolSpec, ...]) -> tuple[ToolSpec, ...]:
        return ()

    def system_addendum(self, specs: tuple[ToolSpec, ...]) -> str:
        lines = [
            "You act only through tools. "
            "To call one, write the tool name and its arguments as one JSON object, for example:",
            '<tool name="list_files">{"path": "."}</tool>',
            "To change a file, you may instead write an anchored edit:",
            "path/to/file.py",
            "<<<<<<< SEARCH",
            "exact lines that exist now",
            "=======",
            "the lines that replace them",
            ">>>>>>> REPLACE",
            "Available tools (arguments marked ? are optional):",
        ]
        for spec in specs:
            lines.append(f"- {spec.name}({_signature(spec.parameters)}): {spec.description}")
        return "\n".join(lines)

    def calls(self, payload: Payload, turn: int) -> tuple[ToolCall, ...]:
        found: list[tuple[int, str, str]] = []
        for m in _TOOL_BLOCK.finditer(payload.text):
            found.append((m.start(), m.group(1), m.group(2).strip()))
        path_f, search_f, replace_f = self.edit_fields
        for m in _EDIT_BLOCK.finditer(payload.text):
            args = {path_f: m.group(1).strip(), search_f: m.group(2), replace_f: m.group(3)}
            found.append((m.start(), self.edit_tool, json.dumps(args, ensure_ascii=False)))
        found.sort(key=lambda item: item[0])
        return tuple(
            ToolCall(id=f"call_{turn}_{i}", name=name, arguments=args) for i, (_, name, args) in enumerate(found)
        )

    def assistant_message(self, payload: Payload, calls: tuple[ToolCall, ...]) -> Message:
        return Message(role="assistant", content=payload.text)

    def observation(self, call: ToolCall, outcome: ToolOutcome) -> Message:
        return Message(role="user", content=f"[{call.name} result]\n{outcome.observation}")


def protocol_named(name: str) -> ToolProtocol:
    if name == "native":
        return NativeProtocol()
    if name == "text":
        return TextProtocol()
    from orchestrator.errors import ConfigError

    raise ConfigError(f"unknown tool protocol {name!r}; use 'native' or 'text'")
