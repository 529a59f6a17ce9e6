"""Engine quirks: the one table of what self-hosted servers do differently
from the OpenAI wire format, and the small pure readers that absorb them.

Each ``Quirk`` names the engines it was seen from, the raw signal and where
Escrow handles it; ``tests/client/test_engine_quirks.py`` holds one test per
row (a test checks that every row has one). A new quirk is a new row here and
a new test there, never a special case elsewhere.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

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


def quirks_markdown() -> str:
    """The table as Markdown, for docs/ENGINES.md."""
    lines = ["| quirk | engines | raw signal | handling |", "|---|---|---|---|"]
    for q in QUIRKS:
        lines.append(f"| `{q.id}` | {', '.join(q.engines)} | {q.signal} | {q.handling} |")
    return "\n".join(lines) + "\n"
