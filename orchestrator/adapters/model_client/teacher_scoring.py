"""A teacher's logprob of every token a student sampled, over the exact ids
the student read and sampled (``escrow score``, on-policy distillation).

Per engine (docs/TOKENS.md, "Teacher scoring"):

- vLLM: ``POST /v1/completions`` with the ids as the prompt, ``max_tokens``
  1 and ``prompt_logprobs`` K; ``choices[0].prompt_logprobs`` is one entry a
  prompt id, ``null`` first, else ``{"<id>": {"logprob", "rank", ...}}`` (the
  top K and the id itself);
- SGLang: ``POST /generate`` with ``input_ids``, ``max_new_tokens`` 0,
  ``return_logprob``, ``logprob_start_len`` 0 and ``top_logprobs_num`` K;
  ``meta_info.input_token_logprobs`` is ``[logprob, id, text]`` a position
  (logprob ``null`` first), ``input_top_logprobs`` the top K alike;
- llama-cpp-python: ``POST /v1/completions`` takes text, not ids: the ids
  are decoded and scored only where
  ``/extras/tokenize`` of that text gives back exactly those ids; then
  ``echo``, ``logprobs`` K and ``max_tokens`` 1 (0 means no limit there)
  give ``token_logprobs`` for every prompt id but the BOS (the text comes
  from the student's decoder where one is given: llama-cpp-python's own
  leaves special tokens out);
- llama.cpp's ``llama-server`` gives no logprobs over a prompt: refused.

Every answer is read strictly (``teacher_answers``): one logprob <= 0 for
every sampled id, and the teacher's top K by id where the engine names them
by id (vLLM, SGLang), else ``TeacherAnswerInvalid`` naming what was wrong,
never a guess.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import httpx

from orchestrator.adapters.model_client.provenance import EngineInfo, probe
from orchestrator.adapters.model_client.server_tokenizer import server_root
from orchestrator.adapters.model_client.teacher_answers import Read, TopK, read_echo, read_sglang, read_vllm
from orchestrator.adapters.model_client.token_endpoints import EngineTokens, post_object
from orchestrator.canonical import canonical_json
from orchestrator.contract import Frozen
from orchestrator.errors import TeacherAnswerInvalid, TeacherRefused

ENGINES = ("vllm", "sglang", "llama-cpp-python", "llama.cpp")
# Texts whose ids two tokenizers must agree on before anything is scored:
# special tokens written out, runs of whitespace, code, non-ASCII.
PROBES = (
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<|im_start|>user\nhi<|im_end|>\n<bos><eos>",
    "a  b\t\tc\n\n\n   d \r\n",
    "def f(x):\n    return {'k': [x ** 2, x // 3]}  # ok\n",
    "naïve café – 日本語のテキスト 🙂 Ωμέγα",
)


class TeacherScore(Frozen):
    """The teacher's figures for one call's sampled ids, in order."""

    logprobs: tuple[float, ...]
    in_top_k: tuple[bool | None, ...]  # None where the engine gave no top K to compare with
    top: TopK | None = None
    """Per sampled id, the teacher's top K (at most K (id, logprob), best first); None where the engine
    names them by text (llama-cpp-python)."""
    top_k: int
    engine: str
    request_sha256: str
    duration_s: float  # the scoring request's time on the teacher: its GPU seconds, as for a model call


def refuse_engine(engine: str) -> None:
    """Raise for an engine that cannot score a prompt."""
    if engine == "llama.cpp":
        raise TeacherRefused(
            "llama.cpp's llama-server gives no logprobs over a prompt (its issue #27174): serve the teacher "
            "with vLLM (prompt_logprobs), SGLang (/generate, logprob_start_len) or llama-cpp-python's server "
            "(echo with logprobs)", engine=engine)
    if engine not in ENGINES:
        raise TeacherRefused(f"unknown teacher engine {engine!r}: one of {', '.join(ENGINES)}", engine=engine)


class TeacherClient:
    """Scores sequences on the teacher at ``base_url`` (with or without ``/v1``)."""

    def __init__(self, base_url: str, model: str, engine: str, *, top_k: int = 1, engine_label: str | None = None,
                 decode: Callable[[Sequence[int]], str] | None = None, http: httpx.Client | None = None,
                 timeout_s: float = 300.0) -> None:
        refuse_engine(engine)
        # llama-cpp-python's /extras/detokenize leaves special tokens out
        # (<start_of_turn>); the student's own decoder (llama-server's
        # /detokenize) writes them. Either way the teacher's tokenizer checks it.
        self.decode = decode
        self.engine_label = engine_label or engine
        if top_k < 1:
            raise TeacherRefused(f"--top-k must be at least 1, not {top_k}", top_k=top_k)
        self.root, self.model, self.engine, self.top_k = server_root(base_url), model, engine, top_k
        self._own = http is None
        self._http = http or httpx.Client(timeout=timeout_s)

    def __enter__(self) -> "TeacherClient":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own:
            self._http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return post_object(self._http, self.root + path, body, TeacherAnswerInvalid)

    # The tokenizer, for the vocabulary check.

    def tokenize(self, text: str) -> tuple[int, ...]:
        """The teacher's ids of ``text``, special tokens read as themselves, no BOS added."""
        if self.engine == "llama-cpp-python":
            ids = _ids(self._post("/extras/tokenize", {"input": text, "model": self.model}).get("tokens"))
            # llama-cpp-python always puts its BOS first; the student's probe has none.
            return ids[1:] if ids and ids[0] == self._bos() else ids
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return _ids(self._post("/tokenize", body).get("tokens"))

    def _bos(self) -> int | None:
        ids = _ids(self._post("/extras/tokenize", {"input": "", "model": self.model}).get("tokens"))
        return ids[0] if ids else None

    def vocab_size(self) -> int | None:
        """The vocabulary size the teacher reports (``/v1/models`` ``meta.n_vocab``), else None."""
        return EngineTokens(self.root, http=self._http).vocab_size()

    # Scoring.

    def score(self, prompt: Sequence[int], sampled: Sequence[int]) -> TeacherScore:
        """The teacher's logprob of each of ``sampled`` after ``prompt`` (and whether it is in its top K)."""
        started = time.monotonic()
        ids = [*prompt, *sampled]
        if not prompt or not sampled:
            raise TeacherAnswerInvalid("nothing to score: a call needs prompt ids and sampled ids")
        if self.engine == "vllm":
            body: dict[str, Any] = {"model": self.model, "prompt": ids, "max_tokens": 1,
                                    "prompt_logprobs": self.top_k, "temperature": 0.0}
            answer = self._post("/v1/completions", body)
            return self._done(body, started, read_vllm(answer, ids, len(sampled), self.top_k))
        if self.engine == "sglang":
            body = {"input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
                    "top_logprobs_num": self.top_k, "sampling_params": {"max_new_tokens": 0, "temperature": 0.0}}
            return self._done(body, started, read_sglang(self._post("/generate", body), ids, len(sampled), self.top_k))
        text = self._text(ids)
        body = {"model": self.model, "prompt": text, "echo": True, "logprobs": self.top_k, "max_tokens": 1,
                "temperature": 0.0}
        return self._done(body, started, read_echo(self._post("/v1/completions", body), len(ids) - 1, len(sampled),
                                                   self.top_k))

    def _text(self, ids: list[int]) -> str:
        """The text whose tokenization is exactly ``ids`` (BOS first), or a refusal."""
        bos = self._bos()
        if ids[0] != bos:
            raise TeacherAnswerInvalid(f"llama-cpp-python puts its BOS ({bos}) first; the recorded prompt "
                                       f"begins with {ids[0]}", first=ids[0])
        text = (self.decode(ids[1:]) if self.decode is not None
                else self._post("/extras/detokenize", {"tokens": ids[1:], "model": self.model}).get("text"))
        if not isinstance(text, str):
            raise TeacherAnswerInvalid("/extras/detokenize gave no text")
        back = _ids(self._post("/extras/tokenize", {"input": text, "model": self.model}).get("tokens"))
        if list(back) != ids:
            at = next((i for i, (a, b) in enumerate(zip(back, ids, strict=False)) if a != b), min(len(back), len(ids)))
            raise TeacherAnswerInvalid(
                f"llama-cpp-python takes text, and the text of these ids tokenizes otherwise (position {at}: "
                f"recorded {ids[at:at + 4]}, re-tokenized {list(back[at:at + 4])}); score it on vLLM or SGLang, "
                "which take ids", position=at)
        return text

    def _done(self, body: dict[str, Any], started: float, read: Read) -> TeacherScore:
        sha = hashlib.sha256(canonical_json(body).encode()).hexdigest()
        logprobs, in_top, top = read
        return TeacherScore(logprobs=logprobs, in_top_k=in_top, top=top, top_k=self.top_k, engine=self.engine,
                            request_sha256=sha, duration_s=time.monotonic() - started)


def _ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TeacherAnswerInvalid("the teacher's tokenizer gave no list of ids")
    return tuple(value)


def teacher_engine(base_url: str, engine: str | None = None, *, http: httpx.Client | None = None) -> EngineInfo:
    """The teacher's engine: the one named, or the one its endpoints say; refused when it cannot score."""
    if engine is not None:
        refuse_engine(engine)
        return EngineInfo(engine=engine, evidence=("--teacher-engine",))
    with _client(http) as probing:
        info = probe(server_root(base_url) + "/v1", probing)
    if not info.reachable:
        raise TeacherRefused(f"no teacher answers at {base_url}", url=base_url)
    if info.engine not in ENGINES:
        raise TeacherRefused(f"the engine at {base_url} is not one that scores a prompt ({info.label}); name it "
                             f"with --teacher-engine ({', '.join(ENGINES[:3])})", url=base_url)
    refuse_engine(info.engine)
    return info


@contextmanager
def checked_teacher(teacher_url: str, model: str, student_url: str, *, engine: str | None, top_k: int,
                    parallel: int) -> Iterator[tuple[TeacherClient, EngineInfo]]:
    """The teacher (its engine found unless named) once its tokenizer is
    found to be the student's, and the engine found; llama-cpp-python's text
    is decoded by the student's own decoder."""
    # One certificate store for the three clients (each would load its own);
    # each keeps the timeout it had.
    tls = httpx.create_ssl_context()
    with httpx.Client(verify=tls) as probing, httpx.Client(timeout=30.0, verify=tls) as student_http, \
            httpx.Client(timeout=300.0, verify=tls) as teacher_http:
        found = teacher_engine(teacher_url, engine, http=probing)
        teacher = TeacherClient(teacher_url, model, found.engine, top_k=top_k, engine_label=found.label,
                                decode=EngineTokens(student_url, http=student_http).detokenize, http=teacher_http)
        check_vocabulary(teacher, student_url, parallel=parallel, http=probing)
        yield teacher, found


def _client(http: httpx.Client | None) -> AbstractContextManager[httpx.Client]:
    """The caller's client (left open), else a new one closed after use."""
    return nullcontext(http) if http is not None else httpx.Client()


def check_vocabulary(teacher: TeacherClient, student_url: str, *, parallel: int = 1,
                     http: httpx.Client | None = None) -> None:
    """Refuse, with both figures, a teacher whose tokenizer is not the
    student's: another vocabulary size where both report one, or other ids
    for any probe text. The probes go ``parallel`` at a time and are judged
    in ``PROBES`` order: a refusal names the first that differs."""
    with _client(http) as client, EngineTokens(student_url, http=client) as student, \
            ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        engine = pool.submit(probe, server_root(student_url) + "/v1", client)
        theirs_size = pool.submit(teacher.vocab_size)
        sizes = (student.vocab_size(), theirs_size.result())
        if None not in sizes and sizes[0] != sizes[1]:
            raise TeacherRefused(f"the student's vocabulary has {sizes[0]} tokens, the teacher's {sizes[1]}: "
                                 "scores over other ids mean nothing; nothing was scored",
                                 student=sizes[0], teacher=sizes[1])
        student_engine = engine.result().engine

        def ours(text: str) -> tuple[int, ...]:
            return (student.tokenize_prompt(text) if student_engine == "vllm"
                    else student.tokenize(text, special=True, bos=False))

        # Submitted in order, student's and teacher's ids of each probe side by side.
        pending = [(text, pool.submit(ours, text), pool.submit(teacher.tokenize, text)) for text in PROBES]
        for text, mine_asked, theirs_asked in pending:
            mine, theirs = mine_asked.result(), theirs_asked.result()
            if mine != theirs:
                at = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
                          min(len(mine), len(theirs)))
                for _, *later in pending:
                    for asked in later:
                        asked.cancel()
                raise TeacherRefused(
                    f"teacher and student tokenize {text!r} otherwise (position {at}: student "
                    f"{list(mine[at:at + 4])}, teacher {list(theirs[at:at + 4])}; {len(mine)} and "
                    f"{len(theirs)} ids): not one vocabulary; nothing was scored", probe=text, position=at)
