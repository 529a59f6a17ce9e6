"""A conversation's token ids, grown call by call: turn t+1's prompt is
turn t's prompt ids + its sampled ids + the ids of what the engine's chat
template writes after an answer (the two-render delta, ``after_answer``),
rendered and tokenized by the engine's endpoints (``token_endpoints``).
The token-in client (``token_exact``) sends what this builds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from orchestrator.adapters.model_client.token_endpoints import EngineTokens, LlamaServerTokens, SGLangTokens
from orchestrator.contract import Message
from orchestrator.errors import TemplateNotPrefixPreserving

# Stands in for an answer in a rendering: text no template writes itself.
SENTINEL = "\u2063escrow-answer-7f3a\u2063"
_SHOWN = 40  # characters (or ids) on each side of a first difference
R = TypeVar("R", str, tuple[int, ...])


def after_answer(before: R, after: R, sentinel: R | None = None) -> R:
    """What the template writes after an answer: ``before`` is the
    conversation up to the answer rendered with its generation prompt,
    ``after`` the same with the answer (``SENTINEL``) and the messages that
    follow it - both as text (llama-server's ``/apply-template``) or both as
    ids (vLLM's ``/tokenize``, ``sentinel`` then the ids of ``SENTINEL``).
    Raises ``TemplateNotPrefixPreserving`` when ``before`` does not begin
    ``after``, or when the template writes anything between its generation
    prompt and the answer (a sampled id would then not follow the last
    prompt's)."""
    unit = "character" if isinstance(before, str) else "token"
    if after[:len(before)] != before:
        at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
                  min(len(before), len(after)))
        shown_before, shown_after = before[max(0, at - _SHOWN):at + _SHOWN], after[max(0, at - _SHOWN):at + _SHOWN]
        raise TemplateNotPrefixPreserving(
            f"the chat template is not prefix-preserving: the conversation rendered with one more answer "
            f"does not begin with its rendering before it (first difference at {unit} {at}: "
            f"{shown_before!r} became {shown_after!r}); --token-exact cannot extend the last prompt's ids",
            position=at, before=str(shown_before), after=str(shown_after))
    mark: Any = SENTINEL if sentinel is None else sentinel
    tail = after[len(before):]
    found = _find(tail, mark)
    if found != 0:
        head = tail[:found] if found > 0 else tail[:0]
        what = (f"writes {head[:2 * _SHOWN]!r} between its generation prompt and the answer" if found > 0
                else "does not render an earlier answer's text as it was written")
        raise TemplateNotPrefixPreserving(
            f"the chat template {what}; --token-exact cannot put the sampled ids after the last prompt's",
            inserted=str(head[:2 * _SHOWN]))
    return tail[len(mark):]


def _find(tail: R, mark: R) -> int:
    """Where ``mark`` first occurs in ``tail``; -1 when it does not."""
    if isinstance(tail, str):
        return tail.find(str(mark))
    return next((i for i in range(len(tail) - len(mark) + 1) if tail[i:i + len(mark)] == mark), -1)


class _Template(Generic[R]):
    """An engine's chat template and tokenizer: a conversation's rendering
    (``R``), the ids written after an answer between two renderings, and a
    conversation's ids whole."""

    def render(self, messages: Sequence[dict[str, Any]]) -> R:
        raise NotImplementedError

    def delta(self, before: R, after: R) -> tuple[int, ...]:
        raise NotImplementedError

    def whole(self, messages: Sequence[dict[str, Any]]) -> tuple[tuple[int, ...], R]:
        """The conversation's ids, and its rendering (kept: the next call's ``before``)."""
        raise NotImplementedError

    def extends(self, before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> tuple[int, ...]:
        return self.delta(self.render(before), self.render(after))


class TextTemplate(_Template[str]):
    """llama-server: a rendering is text (``/apply-template``); what the
    template writes after an answer is tokenized on its own. SGLang the
    same, its rendering done here (``SGLangTokens``)."""

    def __init__(self, tokens: EngineTokens) -> None:
        self.tokens = tokens
        self._bos: tuple[int, ...] | None = None

    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        return self.tokens.apply_template(messages)

    def delta(self, before: str, after: str) -> tuple[int, ...]:
        return self.tokens.tokenize(after_answer(before, after))

    def whole(self, messages: Sequence[dict[str, Any]]) -> tuple[tuple[int, ...], str]:
        """Rendered and tokenized, with the model's BOS once: a template may
        write it itself (Gemma's does) or not (ChatML)."""
        rendered = self.render(messages)
        ids, bos = self.tokens.tokenize(rendered), self.bos()
        return (ids if ids[:len(bos)] == bos else bos + ids), rendered

    def bos(self) -> tuple[int, ...]:
        """The model's BOS ids, asked once (``prepare`` asks, so no turn pays for it)."""
        if self._bos is None:
            self._bos = self.tokens.tokenize("", bos=True)
        return self._bos


class IdTemplate(_Template[tuple[int, ...]]):
    """vLLM: a rendering is ids (``/tokenize`` with messages renders and
    tokenizes in one call), so the delta is cut at the sentinel's ids."""

    def __init__(self, tokens: EngineTokens) -> None:
        self.tokens = tokens
        self._sentinel: tuple[int, ...] | None = None

    def render(self, messages: Sequence[dict[str, Any]]) -> tuple[int, ...]:
        return self.tokens.tokenize_chat(messages)

    def delta(self, before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, ...]:
        if self._sentinel is None:
            self._sentinel = self.tokens.tokenize_prompt(SENTINEL)
        return after_answer(before, after, self._sentinel)

    def whole(self, messages: Sequence[dict[str, Any]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        ids = self.render(messages)
        return ids, ids


def template_for(engine: str, tokens: EngineTokens) -> _Template[Any]:
    """The template and tokenizer the loop extends prompts with on ``engine``:
    vLLM renders ids, llama-server and SGLang text."""
    if engine == "vllm":
        return IdTemplate(tokens)
    if engine == "sglang" and not isinstance(tokens, SGLangTokens):
        tokens = SGLangTokens.sharing(tokens)
    elif engine == "llama.cpp" and not isinstance(tokens, LlamaServerTokens):
        tokens = LlamaServerTokens.sharing(tokens)
    return TextTemplate(tokens)



class TokenSequence:
    """A conversation's token ids, extended call by call with the engine's
    template and tokenizer (``tokens``).

    Every earlier answer is rendered as ``SENTINEL`` too (the delta does not
    depend on what an answer says), so the last call's rendering is the next
    call's ``before`` and a turn costs one ``/apply-template`` and one
    ``/tokenize`` (llama-server) or one ``/tokenize`` (vLLM). After a
    quarantined answer (rendered as an empty turn the history does not
    hold) the conversation is rendered afresh."""

    def __init__(self, template: _Template[Any]) -> None:
        self.template = template
        self._messages: tuple[Message, ...] | None = None  # the last prompt's conversation
        self._prompt: tuple[int, ...] = ()
        self._sampled: tuple[int, ...] = ()
        self._rendered: Any = None  # the last prompt's conversation rendered, its answers as SENTINEL
        self._pending: tuple[tuple[Message, ...], Any] | None = None

    def advance(self, messages: tuple[Message, ...], prompt: tuple[int, ...], sampled: tuple[int, ...]) -> None:
        """The engine answered ``messages``, sent as ``prompt``, with ``sampled``."""
        pending, self._pending = self._pending, None
        self._rendered = pending[1] if pending is not None and pending[0] is messages else None
        self._messages, self._prompt, self._sampled = messages, prompt, sampled

    def prompt_ids(self, messages: tuple[Message, ...]) -> tuple[int, ...]:
        """This conversation's prompt ids, from the last prompt's where it extends it."""
        self._pending = None
        last = self._messages
        if last is None or messages[:len(last)] != last:
            ids, rendered = self.template.whole([m.to_wire() for m in messages])
            if all(m.role != "assistant" for m in messages):  # rendered as the next call renders it (masked)
                self._pending = (messages, rendered)
            return ids
        new = messages[len(last):]
        if not new:
            return self._prompt
        answered = new[0].role == "assistant"
        sampled, rest = (self._sampled, new[1:]) if answered else ((), new)
        template = self.template
        before = self._rendered if self._rendered is not None else template.render(_masked(last))
        rendered = template.render([*_masked(last), _ANSWER, *_masked(rest)])
        if answered:
            self._pending = (messages, rendered)
        return self._prompt + sampled + template.delta(before, rendered)


_ANSWER = {"role": "assistant", "content": SENTINEL}


def _masked(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [_ANSWER if m.role == "assistant" else m.to_wire() for m in messages]
