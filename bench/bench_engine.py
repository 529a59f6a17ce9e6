"""Engine-fidelity costs, measured side by side in one run:

1. recording logprobs at K=5 per token against not recording them, on a
   streamed answer of 2,000 tokens (fault server in its own process; both
   the whole call and the client's pure per-chunk pipeline on captured bytes);
2. ``escrow parity`` per call (re-send + comparison with the record) against
   a plain re-send, on the llama.cpp server (skipped, and said so, when it
   does not answer).

    .venv/bin/python bench/bench_engine.py [--tokens 2000] [--calls 20] [--model-url URL]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_client import capture, start_server, timed  # noqa: E402

from orchestrator.contract import Message, ModelRequest, Sampling  # noqa: E402
from orchestrator.envelope import Status  # noqa: E402
from orchestrator.fault_server import Reply  # noqa: E402
from orchestrator.model_client.accumulate import ResponseAccumulator  # noqa: E402
from orchestrator.model_client.client import ModelClient  # noqa: E402
from orchestrator.model_client.monitor import StreamMonitor  # noqa: E402
from orchestrator.model_client.sse import SSEParser  # noqa: E402
from orchestrator.model_client.wire import WireCompletion  # noqa: E402
from orchestrator.parity import compare  # noqa: E402


def request(
    logprobs: int | None, *, model: str = "bench", max_tokens: int = 10_000, prompt: str = "Count from one to twenty."
) -> ModelRequest:
    return ModelRequest(
        model=model,
        messages=(Message(role="user", content=prompt),),
        max_tokens=max_tokens,
        max_payload_bytes=10_000_000,
        deadline_s=120,
        sampling=Sampling(temperature=0.0, seed=1, logprobs=logprobs is not None, top_logprobs=logprobs),
    )


def pipeline(pieces: list[bytes], keep_logprobs: bool) -> int:
    parser, acc = SSEParser(), ResponseAccumulator(StreamMonitor(10_000_000), keep_logprobs=keep_logprobs)
    for piece in pieces:
        for event in parser.feed(piece):
            if event.data != "[DONE]":
                acc.add(WireCompletion.model_validate_json(event.data))
    return acc.chunks


def logprobs_overhead(tokens: int, calls: int) -> None:
    proc, url = start_server(Reply(text="tok " * tokens, chunk_chars=4, usage="none"))
    try:
        plain, k5 = request(None), request(5)
        with ModelClient(url, token_estimator=lambda s: 0) as client, httpx.Client() as http:
            for req in (plain, k5):
                env = client.call(req)
                assert env.status is Status.COMPLETED, env.error
            got = client.call(k5).logprobs or []
            assert len(got) == tokens and len(got[0]["top_logprobs"]) == 5, len(got)
            captured = {
                name: capture(http, url, json.dumps(r.wire_body()).encode())
                for name, r in (("plain", plain), ("k5", k5))
            }
            plain_s, k5_s = [], []
            for _ in range(calls):  # interleaved: drift on a shared machine hits both sides
                plain_s += timed(lambda: client.call(plain), 1)
                k5_s += timed(lambda: client.call(k5), 1)
        pure_plain = timed(lambda: pipeline(captured["plain"], False), calls)
        pure_k5 = timed(lambda: pipeline(captured["k5"], True), calls)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    sizes = {k: sum(map(len, v)) for k, v in captured.items()}
    p, k = statistics.median(plain_s) * 1e3, statistics.median(k5_s) * 1e3
    pp, pk = statistics.median(pure_plain) * 1e3, statistics.median(pure_k5) * 1e3
    print(f"logprobs K=5 on a streamed {tokens}-token answer ({calls} calls per side, medians)")
    print(
        f"  stream bytes       plain {sizes['plain']:>9}   K=5 {sizes['k5']:>9}   ratio "
        f"{sizes['k5'] / sizes['plain']:.2f}"
    )
    print(
        f"  whole call ms      plain {p:>9.1f}   K=5 {k:>9.1f}   ratio {k / p:.2f}   +{(k - p) * 1e3 / tokens:.1f} "
        "us/token"
    )
    print(
        f"  client pipeline ms plain {pp:>9.1f}   K=5 {pk:>9.1f}   ratio {pk / pp:.2f}   "
        f"+{(pk - pp) * 1e3 / tokens:.1f} us/token"
    )


def parity_cost(model_url: str, calls: int) -> None:
    base = model_url.rstrip("/") + ("" if model_url.rstrip("/").endswith("/v1") else "/v1")
    try:
        httpx.get(base + "/models", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"parity against llama.cpp: skipped, no server at {base} ({type(exc).__name__})")
        return
    req = request(5, model="gemma", max_tokens=12, prompt="Say hi in three words.")
    with ModelClient(base) as client:
        recorded = client.call(req)  # timed whatever its status: parity re-sends faulted calls too
        resend_s, parity_s, verdicts = [], [], []
        for _ in range(calls):
            resend_s += timed(lambda: client.call(req), 1)
            t0 = time.perf_counter()
            verdicts.append(compare(recorded, client.call(req)).verdict)
            parity_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(1000):
            compare(recorded, recorded)
        compare_us = (time.perf_counter() - t0) * 1e3
    r, q = statistics.median(resend_s) * 1e3, statistics.median(parity_s) * 1e3
    print(f"parity against {base} ({calls} calls per side, medians, {len(recorded.logprobs or [])} tokens with top-5,"
          f" recorded status {recorded.status.value})")
    print(
        f"  plain re-send ms {r:.1f}   parity call ms {q:.1f}   ratio {q / r:.3f}   compare alone {compare_us:.1f} us"
    )
    print(f"  verdicts: {dict((v, verdicts.count(v)) for v in set(verdicts))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--model-url", default=os.environ.get("ESCROW_TEST_LLAMA_URL", "http://127.0.0.1:8088"))
    parser.add_argument("--parity-only", action="store_true", help="skip the logprobs part")
    opts = parser.parse_args()
    if not opts.parity_only:
        logprobs_overhead(opts.tokens, opts.calls)
    parity_cost(opts.model_url, max(3, opts.calls // 4))


if __name__ == "__main__":
    main()
