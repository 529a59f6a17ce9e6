"""Engine-fidelity costs, measured side by side in one run:

1. recording logprobs at K=5 per token against not recording them, on a
   streamed answer of 2,000 tokens (fault server in its own process; both
   the whole call and the client's pure per-chunk pipeline on captured bytes);
2. ``escrow parity`` on a recorded run, per call, against a plain re-send of
   the same requests, on llama.cpp's own llama-server started for the bench
   (or on ``--model-url``; skipped, and said so, when neither is there).

    .venv/bin/python bench/bench_engine.py [--tokens 2000] [--calls 20] [--model-url URL] [--parity-only]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.llama_server
from bench_client import capture, start_server, timed  # noqa: E402

from orchestrator.adapters.fault_server import Reply  # noqa: E402
from orchestrator.adapters.model_client.accumulate import ResponseAccumulator  # noqa: E402
from orchestrator.adapters.model_client.client import ModelClient  # noqa: E402
from orchestrator.adapters.model_client.monitor import StreamMonitor  # noqa: E402
from orchestrator.adapters.model_client.sse import SSEParser  # noqa: E402
from orchestrator.adapters.model_client.wire import WireCompletion  # noqa: E402
from orchestrator.contract import Message, ModelRequest, Sampling  # noqa: E402
from orchestrator.envelope import Status  # noqa: E402
from store import Recorder, Store  # noqa: E402
from store.write import synthetic


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


PROMPTS = ("Say hi in three words.", "Name three colours.", "Count to five.", "What is two plus two?")


def record_run(db: Path, base: str, requests: list[ModelRequest]) -> str:
    """Make each call for real and record it as one turn of a run."""
    with Store.open(f"sqlite:///{db}") as store, ModelClient(base) as client:
        recorder = Recorder(store)
        run_id = synthetic.start(recorder, random.Random(16))
        recorder.record_event(run_id, None, "engine", client.engine_info().model_dump(mode="json"))
        for turn, req in enumerate(requests):
            envelope = client.call(req)
            with recorder.turn(run_id, turn) as tx:
                tx.envelope(tx.request(req), envelope)
                tx.commit([Message(role="assistant", content=envelope.payload.text)])
        recorder.finish_run(run_id, "PASS", "ok", turn=len(requests))
    return run_id


def parity_cost(base: str, rounds: int) -> None:
    """``escrow parity`` on a recorded run (in process, as the CLI runs it:
    store read, engine probe, re-send, comparison, report) against plain
    re-sends of the same requests, per call, interleaved round by round."""
    from typer.testing import CliRunner

    from cli.main import app

    requests = [request(5, model="gemma-3-270m", max_tokens=12, prompt=p) for p in PROMPTS]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "escrow.db"
        run_id = record_run(db, base, requests)
        plain_s: list[float] = []
        parity_s: list[float] = []
        in_command_s: list[float] = []
        verdicts: dict[str, int] = {}
        with ModelClient(base) as client:
            for _ in range(rounds):
                plain_s += [sum(timed(lambda: [client.call(r) for r in requests], 1)) / len(requests)]
                t0 = time.perf_counter()
                args = ["parity", run_id, "--model-url", base, "--db", f"sqlite:///{db}", "--json"]
                result = CliRunner().invoke(app, args)
                parity_s.append((time.perf_counter() - t0) / len(requests))
                report = json.loads(result.stdout)
                in_command_s += [c["seconds"] for c in report["calls"]]
                for c in report["calls"]:
                    verdicts[c["comparison"]["verdict"]] = verdicts.get(c["comparison"]["verdict"], 0) + 1
        engine = report["engine"]
    r, q, c = (statistics.median(x) * 1e3 for x in (plain_s, parity_s, in_command_s))
    print(f"escrow parity on a recorded run of {len(requests)} calls against {engine} at {base}"
          f" (top-5 logprobs, 12 tokens max, {rounds} rounds, medians)")
    print(f"  plain re-send ms/call {r:.1f}   escrow parity ms/call {q:.1f}   ratio {q / r:.3f}"
          f"   (re-send inside parity {c:.1f} ms/call)")
    print(f"  verdicts: {verdicts}")


def parity_bench(model_url: str | None, rounds: int) -> None:
    """Against ``--model-url`` if given, else llama.cpp's own llama-server
    (tests/llama_server.py, built by scripts/setup.sh) started for the bench."""
    if model_url is not None:
        base = model_url.rstrip("/") + ("" if model_url.rstrip("/").endswith("/v1") else "/v1")
        try:
            httpx.get(base + "/models", timeout=60).raise_for_status()  # a busy one-slot server answers late
        except httpx.HTTPError as exc:
            print(f"parity: skipped, no server at {base} ({type(exc).__name__})")
            return
        parity_cost(base, rounds)
        return
    from tests.llama_server import BINARY, available, llama_server

    if not available():
        print(f"parity: skipped, no llama-server at {BINARY} (scripts/setup.sh escrow_setup_llama_server)")
        return
    with tempfile.TemporaryDirectory() as tmp, llama_server(Path(tmp) / "server.log") as url:
        parity_cost(f"{url}/v1", rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--model-url", default=None, help="compare against this server (default: start llama-server)")
    parser.add_argument("--parity-only", action="store_true", help="skip the logprobs part")
    opts = parser.parse_args()
    if not opts.parity_only:
        logprobs_overhead(opts.tokens, opts.calls)
    parity_bench(opts.model_url, max(3, opts.calls // 4))


if __name__ == "__main__":
    main()
