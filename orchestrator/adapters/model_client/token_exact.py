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

llama.cpp's ``llama-server`` (``/completion`` with a prompt of ids,
``return_tokens``, ``n_probs``; its ``/apply-template`` and ``/tokenize``)
and vLLM >= 0.10.2 (``/v1/completions`` with a prompt of ids,
``return_token_ids``, ``logprobs``; its ``/tokenize`` renders and tokenizes
a conversation in one call, so vLLM's delta is cut from ids) and SGLang
(``/generate`` with ``input_ids`` and ``return_logprob``; its ``/tokenize``
takes text only, so the model's chat template is rendered here from the
tokenizer files its ``/get_model_info`` names). Stop strings
are not sent: llama-server cuts them from the text but not from the sampled
ids (nor the logprobs), so the two would disagree. A
grammar constraint is sent as chat sends it. Each engine's body and the
reading of its answer are ``token_exact_wire``'s. A call is attempted as the
chat client's are (``calls.Retrier``, ``run_attempt``): TRANSPORT_FAILURE
(a dropped connection, 429, 502-504) retried with backoff, T_max over the
whole call with the watchdog cutting a stalled connection; every outcome
is an Envelope.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from orchestrator.adapters.model_client.accumulate import ResponseAccumulator
from orchestrator.adapters.model_client.attempt import FRAMING_ALLOWANCE, AttemptOutcome, run_attempt
from orchestrator.adapters.model_client.calls import Retrier
from orchestrator.adapters.model_client.monitor import StreamMonitor
from orchestrator.adapters.model_client.normalize import Cause, status_of
from orchestrator.adapters.model_client.provenance import EngineInfo, probe
from orchestrator.adapters.model_client.retry import CircuitBreaker, RetryPolicy
from orchestrator.adapters.model_client.token_endpoints import EngineTokens, LlamaServerTokens
from orchestrator.adapters.model_client.token_exact_wire import answer_path, json_object, read_answer, request_body
from orchestrator.adapters.model_client.token_sequence import SENTINEL, TextTemplate, TokenSequence, template_for
from orchestrator.contract import Frozen, ModelRequest
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Payload, Status, Timings, Usage
from orchestrator.errors import TokenExactUnsupported, TokenizerError
from orchestrator.token_drift import first_difference

TOKEN_EXACT_ENGINES = ("llama.cpp", "vllm", "sglang")


class TokenExactClient:
    """A ``Model`` sending prompts as token ids: to llama-server's
    ``/completion``, or vLLM's ``/v1/completions`` (``return_token_ids``,
    vLLM >= 0.10.2, or SGLang's ``/generate``); ``base_url`` ends in
    ``/v1`` (or not). ``model`` names the model to vLLM's ``/tokenize`` (a
    request names its own). ``retry``, ``sleep``, ``rand``, ``clock`` and
    ``breaker`` are the chat client's (``ModelClient``)."""

    def __init__(self, base_url: str, *, model: str | None = None, retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] | None = None, rand: Callable[[], float] = random.random,
                 clock: Callable[[], float] = time.monotonic, breaker: CircuitBreaker | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(follow_redirects=False)
        # Answers on connections of their own (no keep-alive), as the chat
        # client's: the watchdog learns each socket at its connect and can
        # cut a stalled one.
        self._calls = httpx.Client(follow_redirects=False, limits=httpx.Limits(max_keepalive_connections=0))
        self.tokens = EngineTokens(self.base_url, http=self._http, model=model)
        self._clock = clock
        self.breaker = breaker or CircuitBreaker(retry.breaker_threshold, retry.breaker_reset_s, clock)
        self._retrier = Retrier(retry, self.breaker, sleep=sleep, rand=rand, clock=clock)
        self._engine: EngineInfo | None = None
        self._sequence: TokenSequence | None = None
        # llama-server: why its template is not rendered here (None: it is, or not asked).
        self.server_renders_because: str | None = None

    def __enter__(self) -> "TokenExactClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        self._calls.close()

    def engine_info(self) -> EngineInfo:
        if self._engine is None:
            self._engine = probe(self.base_url if self.base_url.endswith("/v1") else self.base_url + "/v1",
                                 self._http)
        return self._engine

    @property
    def engine(self) -> str:
        return self.engine_info().engine

    @property
    def url(self) -> str:
        return self.tokens.root + answer_path(self.engine)

    @property
    def sequence(self) -> TokenSequence:
        if self._sequence is None:
            self._sequence = TokenSequence(template_for(self.engine, self.tokens))
        return self._sequence

    def prepare(self, roles: Sequence[str] = ("user",)) -> None:
        """Refuse, before the first call, an engine that takes no prompt of ids
        and a template the loop cannot extend: a conversation of one user
        message, then an answer followed by one message of each of ``roles``
        (the roles the loop appends after an answer)."""
        engine = self.engine_info()
        if engine.engine not in TOKEN_EXACT_ENGINES:
            raise TokenExactUnsupported(
                f"--token-exact sends prompts as token ids, which only llama.cpp's llama-server (/completion), "
                f"vLLM (/v1/completions) and SGLang (/generate) take here; the engine at {self.base_url} is "
                f"{engine.label}",
                engine=engine.label)
        first = [{"role": "user", "content": "a"}]
        answered = [*first, {"role": "assistant", "content": SENTINEL},
                    *({"role": role, "content": "b"} for role in roles)]
        self.sequence.template.extends(first, answered)
        template = self.sequence.template
        if isinstance(template, TextTemplate):
            template.bos()
        if isinstance(template, TextTemplate) and isinstance(template.tokens, LlamaServerTokens):
            # The shapes the loop renders: a system message, answers, each
            # appended role, text with the template's own markup in it.
            after = [{"role": role, "content": "c <start_of_turn>\n\n"} for role in roles]
            system = [{"role": "system", "content": "s\n"}, *answered, {"role": "assistant", "content": SENTINEL},
                      *after]
            self.server_renders_because = template.tokens.adopt_local([first, answered, system])

    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope:
        start = self._clock()
        sha = request.sha256()
        if cancel is not None and cancel.is_set():
            return self._failed(Status.CANCELED, Cause.EXTERNAL_CANCEL, "cancelled before the request was sent",
                                start, self._clock(), sha)
        try:
            ids = self.sequence.prompt_ids(request.messages)
        except TokenizerError as exc:
            return self._failed(Status.FAULTED, Cause.INTERNAL_ERROR, str(exc), start, self._clock(), sha)
        body = json.dumps(request_body(self.engine, request, ids)).encode()
        url, deadline_at = self.url, start + request.deadline_s
        out, attempts = self._retrier.run(lambda: self._attempt(url, body, request, deadline_at, cancel),
                                          deadline_at=deadline_at, cancel=cancel)
        end = self._clock()
        raw = bytes(out.raw).decode("utf-8", "replace") if out.raw_total else None
        if out.body is None or out.cause is not Cause.FINISH_STOP:
            return self._failed(status_of(out.cause), out.cause, f"{url}: {out.message}", start, end, sha,
                                http_status=out.http_status, raw=raw, attempts=attempts)
        return self._envelope(request, ids, json_object(out.body), raw or "", start, end, sha, attempts)

    def _attempt(self, url: str, body: bytes, request: ModelRequest, deadline_at: float,
                 cancel: threading.Event | None) -> AttemptOutcome:
        acc = ResponseAccumulator(StreamMonitor(request.max_payload_bytes))
        now = self._clock()
        blocked = self._retrier.blocked(cancel)
        if blocked is not None:
            return AttemptOutcome(*blocked, acc, started=now, ended=now)
        return run_attempt(self._calls, url, body, {"content-type": "application/json", "accept": "application/json"},
                           acc, deadline_at=deadline_at, cancel=cancel,
                           body_cap=request.max_payload_bytes + FRAMING_ALLOWANCE, clock=self._clock, whole=True)

    def _envelope(self, request: ModelRequest, ids: tuple[int, ...], data: dict[str, Any], raw: str, start: float,
                  end: float, sha: str, attempts: list[Attempt]) -> Envelope:
        read = read_answer(self.engine, data, request, ids)
        if isinstance(read, str):
            return self._failed(Status.FAULTED, Cause.MALFORMED_PROTOCOL, f"{self.url} {read}",
                                start, end, sha, http_status=200, raw=raw, attempts=attempts)
        status = Status.TRUNCATED if read.finish == "length" else Status.COMPLETED
        self.sequence.advance(request.messages, ids, read.sampled)
        prompt, completion, cached = read.prompt_tokens, read.completion_tokens, read.cached
        return Envelope(
            status=status,
            payload=Payload(text=read.text),
            finish_reason=read.finish,
            http_status=200,
            usage=Usage(
                prompt_tokens=prompt or 0,
                prompt_source="server" if prompt is not None else "absent",
                cached_prompt_tokens=cached if cached is not None and prompt is not None
                and 0 <= cached <= prompt else 0,
                cached_source="server" if cached is not None else "absent",
                completion_tokens=completion or 0,
                completion_source="server" if completion is not None else "absent",
            ),
            timings=Timings(total_s=end - start),
            model=read.model,
            engine=self._label(),
            logprobs=read.logprobs,
            top_logprobs=request.sampling.top_logprobs if request.sampling.logprobs else None,
            prompt_token_ids=ids,
            completion_token_ids=read.sampled,
            error=None if status is Status.COMPLETED else ErrorDetail(
                kind=Cause.FINISH_LENGTH.value, message="the answer reached its output limit"),
            attempts=(*attempts[:-1], attempts[-1].model_copy(update={"status": status})),
            request_sha256=sha,
            payload_bytes=len(read.text.encode()),
            raw_response=raw,
        )

    def _label(self) -> str:
        return self._engine.label if self._engine is not None else "llama.cpp"

    def _failed(self, status: Status, cause: Cause, message: str, start: float, end: float, sha: str, *,
                http_status: int | None = None, raw: str | None = None,
                attempts: list[Attempt] | None = None) -> Envelope:
        """The call's outcome ``status``; the last attempt's, when one was
        made, ends as the call did."""
        error = ErrorDetail(kind=cause.value, message=message)
        last = Attempt(number=1, status=status, http_status=http_status, error=error, duration_s=end - start)
        if attempts:
            last = attempts[-1].model_copy(update={"status": status, "error": error})
        return Envelope(status=status, error=error, http_status=http_status, timings=Timings(total_s=end - start),
                        attempts=(*(attempts or ())[:-1], last),
                        request_sha256=sha, raw_response=raw, engine=self._label())


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
    where it happens, not carried on. A run recorded from vLLM is rendered
    with vLLM's ``/tokenize``, one from SGLang with its tokenizer and the
    model's template, any other with llama-server's endpoints."""
    engines = {(envelope.engine or "").split(" ")[0] for *_, envelope in calls}
    engine = "vllm" if "vllm" in engines else "sglang" if "sglang" in engines else "llama.cpp"
    sequence = TokenSequence(template_for(engine, tokens))
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
