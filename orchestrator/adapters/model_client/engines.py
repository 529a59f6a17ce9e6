"""Engine quirks: the one table of what self-hosted servers do differently
from the OpenAI wire format, and the small pure readers that absorb them.

Each ``Quirk`` names the engines it was seen from, the raw signal and where
Escrow handles it; ``tests/client/test_engine_quirks.py`` holds one test per
row (a test checks that every row has one). A new quirk is a new row here and
a new test there, never a special case elsewhere.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from orchestrator.contract import Constraint

ENGINES = ("vllm", "sglang", "llama.cpp", "llama-cpp-python", "ollama", "openai-compatible")


class Quirk(NamedTuple):
    id: str
    engines: tuple[str, ...]
    signal: str
    handling: str


QUIRKS: tuple[Quirk, ...] = (
    Quirk("repeated_tool_name", ("openai-compatible",),
          "a streamed tool call repeats its full `function.name` in later deltas",
          "accumulate: a name equal to the one already held is not appended (no `foofoo`)"),
    Quirk("timings_without_usage", ("llama.cpp",),
          "`timings` (prompt_n, cache_n, predicted_n) and no `usage` block",
          "call_usage: prompt = prompt_n + cache_n, completion = predicted_n, source `server`; "
          "cached never exceeds prompt"),
    Quirk("prompt_tokens_without_cache", ("llama.cpp",),
          "`usage.prompt_tokens` that leaves out the `timings.cache_n` tokens reused from the slot",
          "call_usage: prompt = max(prompt_tokens, prompt_n + cache_n)"),
    Quirk("no_usage_when_streaming", ("llama-cpp-python",),
          "no usage at all in a streamed response",
          "call_usage: figures estimated and marked `estimated`"),
    Quirk("sse_error_field", ("llama.cpp",),
          "a stream error written as an `error:` SSE field instead of `data:`",
          "sse: `error` is read as a field; attempt: FAULTED with the server's message"),
    Quirk("event_error", ("openai-compatible",),
          "`event: error` followed by `data:` with the error object",
          "attempt: an event named `error` is FAULTED with its message"),
    Quirk("bare_json_error", ("openai-compatible",),
          "a bare JSON error body, no SSE framing, inside a 200 `text/event-stream`",
          "sse: non-field lines starting with `{` form a bare event; attempt: FAULTED with the message"),
    Quirk("object_error_chunk", ("vllm",),
          '`data: {"object": "error", "message": ..., "code": ...}` (vLLM ErrorResponse) mid-stream',
          "error_message: read as an error, FAULTED"),
    Quirk("string_error", ("ollama",),
          '`{"error": "text"}`: the error is a string, not an object',
          "error_message: the string is the message"),
    Quirk("reasoning_field_name", ("vllm", "sglang", "llama.cpp", "ollama"),
          "reasoning deltas as `reasoning_content` (DeepSeek, SGLang, llama.cpp, vLLM < 0.10) "
          "or `reasoning` (vLLM >= 0.10, Ollama)",
          "accumulate: both are kept as the payload's reasoning and counted against M_max"),
    Quirk("reasoning_tokens_excluded", ("openai-compatible",),
          "`completion_tokens` leaves out `completion_tokens_details.reasoning_tokens` "
          "(total = prompt + completion + reasoning)",
          "call_usage: completion is normalised to include reasoning; the convention seen is recorded"),
    Quirk("post_sampling_probs", ("llama.cpp",),
          "with `post_sampling_probs` set, logprob entries carry `prob` and `top_probs` "
          "(probabilities after the sampler chain)",
          "logprobs: read as their logs; the call's `logprobs_mode` says `post_sampling (request)`"),
    Quirk("json_object_schema", ("llama-cpp-python",),
          "structured output constrained by `response_format: {type: json_object, schema}`, not OpenAI's `json_schema`",
          "engines.response_format: `--schema-style json_object` sends that shape"),
    Quirk("unsent_end_of_generation", ("llama.cpp",),
          "`usage.completion_tokens` (predicted_n) counts the end-of-generation token it sampled, which has no "
          "logprob entry and so no id",
          "token_drift.length_problems: an answer that stopped may have one id fewer than completion_tokens"),
    Quirk("no_system_turn", ("llama.cpp", "llama-cpp-python"),
          "a chat template without a system turn (Gemma) silently drops system messages",
          "settings `system_role = \"user\"`: the context sends the system prompt as the first user message"),
    Quirk("gbnf_grammar_field", ("llama.cpp", "llama-cpp-python"),
          "grammar-constrained sampling takes GBNF in a top-level `grammar` field of the chat request",
          "engines.constraint_for: `--constrain tools` sends the text protocol's grammar as `grammar`"),
    Quirk("structured_outputs_renamed", ("vllm",),
          "a grammar goes in `structured_outputs: {grammar}` from 0.10.2; `guided_grammar` before "
          "(removed in 0.12)",
          "engines.constraint_for: the field by the probed version (`structured_outputs` when unknown)"),
    Quirk("ebnf_field", ("sglang",),
          "a grammar goes in a top-level `ebnf` field (GGML BNF, read by XGrammar); one of "
          "`json_schema`, `regex`, `ebnf` per request",
          "engines.constraint_for: the text protocol's grammar is sent as `ebnf`"),
    Quirk("tool_choice_required", ("vllm", "sglang", "llama.cpp"),
          "native tool calls are forced (and their arguments constrained to the schema) by "
          "`tool_choice: \"required\"`; llama-cpp-python and Ollama do not honour it",
          "engines.constraint_for: `--constrain tools` with native calls sends `tool_choice: required`"),
)
QUIRK_IDS = frozenset(q.id for q in QUIRKS)


def error_message(value: Any) -> str | None:
    """The message of a server error report in any of the shapes engines use,
    or None when ``value`` is not an error report."""
    if not isinstance(value, dict):
        return None
    error = value.get("error")
    if isinstance(error, str) and error:
        return error  # string_error
    if isinstance(error, dict):
        return str(error.get("message") or json.dumps(error, sort_keys=True))
    if value.get("object") == "error":  # object_error_chunk
        return str(value.get("message") or json.dumps(value, sort_keys=True))
    return None


def error_text_message(text: str) -> str | None:
    """``error_message`` of a JSON text; None if it is not JSON or no error."""
    try:
        return error_message(json.loads(text))
    except ValueError:
        return None


SCHEMA_STYLES = ("json_schema", "json_object")


def response_format(schema: dict[str, Any], style: str) -> dict[str, Any]:
    """The ``response_format`` that constrains output to ``schema``: OpenAI's
    and vLLM's ``json_schema``, or llama-cpp-python's ``json_object``."""
    if style == "json_object":  # json_object_schema
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


# Engines that honour a grammar in the text protocol, and `tool_choice:
# "required"` with native calls (see the quirks above).
GRAMMAR_ENGINES = ("llama.cpp", "llama-cpp-python", "vllm", "sglang")
TOOL_CHOICE_ENGINES = ("vllm", "sglang", "llama.cpp")
_VLLM_STRUCTURED_OUTPUTS = (0, 10, 2)


def _version(text: str | None) -> tuple[int, ...] | None:
    numbers = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return None if numbers is None else tuple(int(n) for n in numbers.groups(default="0"))


# Engines that honour a grammar but check it against the whole vocabulary at
# every sampled token: with Gemma 3's 262k-token vocabulary, llama-cpp-python
# took about 0.6 s a token constrained against 0.09 s unconstrained here
# (bench/bench_constrain.py). ``--constrain auto`` leaves them unconstrained
# and says so; ``--constrain tools`` still asks for the grammar.
SLOW_GRAMMAR_ENGINES = ("llama-cpp-python",)


def slow_to_constrain(engine: str, protocol: str) -> str | None:
    """Why ``auto`` leaves ``engine`` unconstrained though it could be, or None."""
    if protocol == "text" and engine in SLOW_GRAMMAR_ENGINES:
        return (f"{engine} checks a grammar against the whole vocabulary at every token (several times slower "
                "a token, measured); --constrain tools asks for it anyway")
    return None


def constrains(engine: str, protocol: str) -> bool:
    """Whether Escrow knows how to constrain ``engine``'s tool calls under ``protocol``."""
    return engine in (GRAMMAR_ENGINES if protocol == "text" else TOOL_CHOICE_ENGINES)


def constraint_for(engine: str, version: str | None, protocol: str, grammar: str | None,
                   loosened: tuple[str, ...] = ()) -> Constraint | None:
    """The request fields that constrain tool calls on ``engine`` (None where
    it has none Escrow knows): the text protocol's ``grammar`` (GBNF) in the
    engine's dialect, or ``tool_choice: "required"`` for native calls."""
    if not constrains(engine, protocol):
        return None
    if protocol != "text":  # tool_choice_required
        return Constraint(kind="tool_choice", engine=engine, fields={"tool_choice": "required"})
    if grammar is None:
        return None
    fields: dict[str, Any]
    if engine in ("llama.cpp", "llama-cpp-python"):  # gbnf_grammar_field
        fields = {"grammar": grammar}
    elif engine == "sglang":  # ebnf_field
        fields = {"ebnf": grammar}
    else:  # structured_outputs_renamed
        seen = _version(version)
        old = seen is not None and seen < _VLLM_STRUCTURED_OUTPUTS
        fields = {"guided_grammar": grammar} if old else {"structured_outputs": {"grammar": grammar}}
    return Constraint(kind="grammar", engine=engine, fields=fields, loosened=loosened)


def quirks_markdown() -> str:
    """The table as Markdown, for docs/ENGINES.md."""
    lines = ["| quirk | engines | raw signal | handling |", "|---|---|---|---|"]
    for q in QUIRKS:
        lines.append(f"| `{q.id}` | {', '.join(q.engines)} | {q.signal} | {q.handling} |")
    return "\n".join(lines) + "\n"
