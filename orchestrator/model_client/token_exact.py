"""The token-in loop's model (``escrow run --token-exact``): the client holds
the conversation's token ids and sends each prompt as ids, so every id the
engine reads after the first prompt is one it sampled or one its own
template added.

Turn t+1's prompt = turn t's prompt ids + turn t's sampled ids + the ids of
what the template writes after an answer (end of turn, the tool results,
the next generation prompt). That text is the two-render delta: the
conversation before the answer rendered with its generation prompt must
begin the conversation with the answer (a sentinel in its place) and the new
messages; what follows the sentinel is tokenized. An answer the escrow
quarantined is not in the history: its sampled ids are dropped and the
template's text after an empty answer follows the last prompt. A history
rewritten (compaction) is rendered and tokenized whole, which the drift
check (``escrow tokens``) reads as a FORK.

llama.cpp's ``llama-server`` only (``/completion`` with a prompt of ids,
``return_tokens``, ``n_probs``; its ``/apply-template`` and ``/tokenize``).
Stop strings are not sent: llama-server cuts them from the text but not
from the sampled ids (nor the logprobs), so the two would disagree. A
grammar constraint is sent as chat sends it. One attempt per call, no
retry; every outcome is an Envelope.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from orchestrator.contract import Frozen, Message, ModelRequest
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Payload, Status, Timings, Usage
from orchestrator.errors import TemplateNotPrefixPreserving, TokenExactUnsupported, TokenizerError
from orchestrator.model_client.attempt import RAW_CAP
from orchestrator.model_client.normalize import Cause
from orchestrator.model_client.provenance import EngineInfo, probe
from orchestrator.model_client.token_endpoints import EngineTokens
from orchestrator.token_drift import first_difference

TOKEN_EXACT_ENGINES = ("llama.cpp",)
# Stands in for an answer in a rendering: text no template writes itself.
SENTINEL = "\u2063escrow-answer-7f3a\u2063"
_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}
_SHOWN = 40  # characters on each side of a first difference


def after_answer(before: str, after: str) -> str:
    """What the template writes after an answer: ``before`` is the
    conversation up to the answer rendered with its generation prompt,
    ``after`` the same with the answer (``SENTINEL``) and the messages that
    follow it. Raises ``TemplateNotPrefixPreserving`` when ``before`` does
    not begin ``after``, or when the template writes anything between its
    generation prompt and the answer (a sampled id would then not follow the
    last prompt's)."""
    if not after.startswith(before):
        at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
                  min(len(before), len(after)))
        raise TemplateNotPrefixPreserving(
            f"the chat template is not prefix-preserving: the conversation rendered with one more answer "
            f"does not begin with its rendering before it (first difference at character {at}: "
            f"{before[max(0, at - _SHOWN):at + _SHOWN]!r} became {after[max(0, at - _SHOWN):at + _SHOWN]!r}); "
            f"--token-exact cannot extend the last prompt's ids",
            position=at, before=before[max(0, at - _SHOWN):at + _SHOWN], after=after[max(0, at - _SHOWN):at + _SHOWN])
    tail = after[len(before):]
    head, found, rest = tail.partition(SENTINEL)
    if not found or head:
        what = (f"writes {head[:2 * _SHOWN]!r} between its generation prompt and the answer" if found
                else "does not render an earlier answer's text as it was written")
        raise TemplateNotPrefixPreserving(
            f"the chat template {what}; --token-exact cannot put the sampled ids after the last prompt's",
            inserted=head[:2 * _SHOWN])
    return rest


class TokenSequence:
    """A conversation's token ids, extended call by call with the engine's
    template and tokenizer (``tokens``).

    Every earlier answer is rendered as ``SENTINEL`` too (the delta does not
    depend on what an answer says), so the last call's rendering is the next
    call's ``before`` and a turn costs one ``/apply-template`` and one
    ``/tokenize``. After a quarantined answer (rendered as an empty turn the
    history does not hold) the conversation is rendered afresh."""

    def __init__(self, tokens: EngineTokens) -> None:
        self.tokens = tokens
        self._messages: tuple[Message, ...] | None = None  # the last prompt's conversation
        self._prompt: tuple[int, ...] = ()
        self._sampled: tuple[int, ...] = ()
        self._rendered: str | None = None  # the last prompt's conversation rendered, its answers as SENTINEL
        self._pending: tuple[tuple[Message, ...], str] | None = None
        self._bos: tuple[int, ...] | None = None

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
            return self._whole(messages)
        new = messages[len(last):]
        if not new:
            return self._prompt
        answered = new[0].role == "assistant"
        sampled, rest = (self._sampled, new[1:]) if answered else ((), new)
        before = self._rendered if self._rendered is not None else self.tokens.apply_template(_masked(last))
        rendered = self.tokens.apply_template([*_masked(last), _ANSWER, *_masked(rest)])
        if answered:
            self._pending = (messages, rendered)
        return self._prompt + sampled + self.tokens.tokenize(after_answer(before, rendered))

    def _whole(self, messages: tuple[Message, ...]) -> tuple[int, ...]:
        """A conversation rendered and tokenized whole, with the model's BOS
        once: a template may write it itself (Gemma's does) or not (ChatML)."""
        ids = self.tokens.tokenize(self.tokens.apply_template([m.to_wire() for m in messages]))
        if self._bos is None:
            self._bos = self.tokens.tokenize("", bos=True)
        return ids if ids[:len(self._bos)] == self._bos else self._bos + ids


_ANSWER = {"role": "assistant", "content": SENTINEL}


def _masked(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [_ANSWER if m.role == "assistant" else m.to_wire() for m in messages]


class TokenExactClient:
    """A ``Model`` sending prompts as token ids to llama-server's
    ``/completion``; ``base_url`` ends in ``/v1`` (or not)."""

    def __init__(self, base_url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(follow_redirects=False)
        self.tokens = EngineTokens(self.base_url, http=self._http)
        self.url = self.tokens.root + "/completion"
        self._clock = clock
        self._engine: EngineInfo | None = None
        self.sequence = TokenSequence(self.tokens)

    def __enter__(self) -> "TokenExactClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def engine_info(self) -> EngineInfo:
        if self._engine is None:
            self._engine = probe(self.base_url if self.base_url.endswith("/v1") else self.base_url + "/v1",
                                 self._http)
        return self._engine

    def prepare(self, roles: Sequence[str] = ("user",)) -> None:
        """Refuse, before the first call, an engine that takes no prompt of ids
        and a template the loop cannot extend: a conversation of one user
        message, then an answer followed by one message of each of ``roles``
        (the roles the loop appends after an answer)."""
        engine = self.engine_info()
        if engine.engine not in TOKEN_EXACT_ENGINES:
            raise TokenExactUnsupported(
                f"--token-exact sends prompts as token ids, which only llama.cpp's llama-server takes "
                f"(/completion); the engine at {self.base_url} is {engine.label}", engine=engine.label)
        first = [{"role": "user", "content": "a"}]
        answered = [*first, {"role": "assistant", "content": SENTINEL},
                    *({"role": role, "content": "b"} for role in roles)]
        after_answer(self.tokens.apply_template(first), self.tokens.apply_template(answered))

    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope:
        start = self._clock()
        sha = request.sha256()
        if cancel is not None and cancel.is_set():
            return _failed(Status.CANCELED, Cause.EXTERNAL_CANCEL, "cancelled before the request was sent",
                           start, self._clock(), sha)
        try:
            ids = self.sequence.prompt_ids(request.messages)
        except TokenizerError as exc:
            return _failed(Status.FAULTED, Cause.INTERNAL_ERROR, str(exc), start, self._clock(), sha)
        try:
            response = self._http.post(self.url, json=self._body(request, ids), timeout=request.deadline_s)
        except httpx.HTTPError as exc:
            cause = Cause.DEADLINE if isinstance(exc, httpx.TimeoutException) else Cause.CONNECT_ERROR
            return _failed(Status.TRANSPORT_FAILURE, cause, f"{self.url}: {exc}", start, self._clock(), sha)
        return self._envelope(request, ids, response, start, sha)

    def _body(self, request: ModelRequest, ids: tuple[int, ...]) -> dict[str, Any]:
        sampling = request.sampling
        body: dict[str, Any] = {"prompt": list(ids), "n_predict": request.max_tokens, "stream": False,
                                "return_tokens": True, "cache_prompt": True}
        for key in ("temperature", "top_p", "top_k", "seed"):
            if getattr(sampling, key) is not None:
                body[key] = getattr(sampling, key)
        if sampling.logprobs:
            body["n_probs"] = max(1, sampling.top_logprobs or 1)
        if request.constraint is not None and request.constraint.kind == "grammar":
            body.update(request.constraint.fields)  # llama-server's own field (grammar), as chat takes it
        return body

    def _envelope(self, request: ModelRequest, ids: tuple[int, ...], response: httpx.Response, start: float,
                  sha: str) -> Envelope:
        end = self._clock()
        raw = response.text[:RAW_CAP]
        if response.status_code != 200:
            status = Status.TRANSPORT_FAILURE if response.status_code >= 500 else Status.REJECTED
            return _failed(status, Cause.HTTP_ERROR, f"{self.url} answered HTTP {response.status_code}: {raw[:300]}",
                           start, end, sha, http_status=response.status_code, raw=raw)
        data = _object(response)
        content, sampled = data.get("content"), data.get("tokens")
        if not isinstance(content, str) or not _ids(sampled):
            return _failed(Status.FAULTED, Cause.MALFORMED_PROTOCOL,
                           f"{self.url} answered without its text and sampled ids (content, tokens)",
                           start, end, sha, http_status=200, raw=raw)
        assert isinstance(sampled, list)
        evaluated, predicted = data.get("tokens_evaluated"), data.get("tokens_predicted")
        timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
        cached = timings.get("cache_n") if isinstance(timings, dict) else None
        finish = _FINISH.get(str(data.get("stop_type")))
        status = Status.TRUNCATED if finish == "length" else Status.COMPLETED
        probs = data.get("completion_probabilities") if request.sampling.logprobs else None
        self.sequence.advance(request.messages, ids, tuple(sampled))
        engine = self._engine.label if self._engine is not None else "llama.cpp"
        return Envelope(
            status=status,
            payload=Payload(text=content),
            finish_reason=finish,
            http_status=200,
            usage=Usage(
                prompt_tokens=evaluated if isinstance(evaluated, int) else 0,
                prompt_source="server" if isinstance(evaluated, int) else "absent",
                cached_prompt_tokens=cached if isinstance(cached, int) and isinstance(evaluated, int)
                and 0 <= cached <= evaluated else 0,
                cached_source="server" if isinstance(cached, int) else "absent",
                completion_tokens=predicted if isinstance(predicted, int) else 0,
                completion_source="server" if isinstance(predicted, int) else "absent",
            ),
            timings=Timings(total_s=end - start),
            model=data.get("model") if isinstance(data.get("model"), str) else None,
            engine=engine,
            logprobs=probs if isinstance(probs, list) else None,
            top_logprobs=request.sampling.top_logprobs if request.sampling.logprobs else None,
            prompt_token_ids=ids,
            completion_token_ids=tuple(sampled),
            error=None if status is Status.COMPLETED else ErrorDetail(
                kind=Cause.FINISH_LENGTH.value, message="the answer reached its output limit"),
            attempts=(Attempt(number=1, status=status, http_status=200, duration_s=end - start),),
            request_sha256=sha,
            payload_bytes=len(content.encode()),
            raw_response=raw,
        )


def _ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def _object(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _failed(status: Status, cause: Cause, message: str, start: float, end: float, sha: str, *,
            http_status: int | None = None, raw: str | None = None) -> Envelope:
    error = ErrorDetail(kind=cause.value, message=message)
    return Envelope(status=status, error=error, http_status=http_status, timings=Timings(total_s=end - start),
                    attempts=(Attempt(number=1, status=status, http_status=http_status, error=error,
                                      duration_s=end - start),),
                    request_sha256=sha, raw_response=raw, engine="llama.cpp")


class Rebuilt(Frozen):
    """One recorded call's prompt ids against the ids rebuilt from the
    recording: the call's messages, the previous prompt's recorded ids and
    sampled ids, and the engine's template and tokenizer."""

    call_id: str
    turn: int | None
    recorded: int | None
    """Prompt ids recorded; None when the engine gave none (nothing to check)."""
    rebuilt: int | None = None
    position: int | None = None
    """The first position where they differ; None when they are the same."""
    recorded_text: str | None = None
    rebuilt_text: str | None = None
    """The ids around ``position`` on each side, decoded."""


def rebuild_prompts(tokens: EngineTokens, calls: Sequence[tuple[str, int | None, ModelRequest, Envelope]],
                    *, around: int = 8) -> tuple[Rebuilt, ...]:
    """Replay a token-exact run's prompts at the token level: each call's
    prompt ids rebuilt as the loop built them, compared with the recording.
    Each call continues from the recorded ids, so every divergence is named
    where it happens, not carried on."""
    sequence = TokenSequence(tokens)
    out: list[Rebuilt] = []
    for call_id, turn, request, envelope in calls:
        recorded = envelope.prompt_token_ids
        if recorded is None:
            out.append(Rebuilt(call_id=call_id, turn=turn, recorded=None))
            continue
        ids = sequence.prompt_ids(request.messages)
        at = first_difference(ids, recorded)
        if at == len(ids) == len(recorded):
            out.append(Rebuilt(call_id=call_id, turn=turn, recorded=len(recorded), rebuilt=len(ids)))
        else:
            span = slice(max(0, at - around), at + around)
            out.append(Rebuilt(call_id=call_id, turn=turn, recorded=len(recorded), rebuilt=len(ids), position=at,
                               recorded_text=tokens.detokenize(recorded[span]),
                               rebuilt_text=tokens.detokenize(ids[span])))
        if envelope.completion_token_ids is not None:
            sequence.advance(request.messages, recorded, envelope.completion_token_ids)
    return tuple(out)
