"""Client overhead per call: ModelClient (SSE parsing, wire validation,
accumulation, stream monitor, envelope) against raw httpx reading the very
same stream bytes from the fault server, measured side by side in one run.

The fault server runs as a separate process (``escrow fault-server``), so the
server's work does not share this process's GIL. Run:

    .venv/bin/python bench/bench_client.py [--chunks 2000] [--calls 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx

from orchestrator.adapters.fault_server import Reply, Script, ScriptedToolCall
from orchestrator.adapters.model_client.accumulate import ResponseAccumulator
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.monitor import StreamMonitor
from orchestrator.adapters.model_client.sse import SSEParser
from orchestrator.adapters.model_client.wire import WireCompletion
from orchestrator.contract import Message, ModelRequest
from orchestrator.envelope import Status


def scenarios(chunks: int) -> dict[str, Reply]:
    args = json.dumps({"content": "y" * (chunks * 4 - 16)})  # one valid JSON value, chunks*4 characters
    return {
        "text": Reply(text="word " * (chunks * 4 // 5), chunk_chars=4, usage="none"),
        "tool-call": Reply(
            tool_calls=(ScriptedToolCall(name="write_file", arguments=args),), chunk_chars=4, usage="none"
        ),
    }


def start_server(reply: Reply) -> tuple[subprocess.Popen, str]:
    script = Path(tempfile.mkdtemp()) / "script.json"
    script.write_text(Script(steps=(reply,), cycle=True).model_dump_json())
    escrow = str(Path(sys.executable).with_name("escrow"))
    proc = subprocess.Popen([escrow, "fault-server", "--script", str(script), "--port", "0", "--json"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())["base_url"]


def raw_httpx(http: httpx.Client, url: str, body: bytes) -> int:
    received = 0
    with http.stream("POST", url + "/chat/completions", content=body,
                     headers={"content-type": "application/json", "accept": "text/event-stream"}) as response:
        for chunk in response.iter_bytes():
            received += len(chunk)
    return received


def capture(http: httpx.Client, url: str, body: bytes) -> list[bytes]:
    with http.stream(
        "POST", url + "/chat/completions", content=body, headers={"content-type": "application/json"}
    ) as r:
        return list(r.iter_bytes())


def offline_pipeline(pieces: list[bytes], max_bytes: int) -> int:
    """The client's pure per-chunk work on captured bytes, no network."""
    parser, acc = SSEParser(), ResponseAccumulator(StreamMonitor(max_bytes))
    for piece in pieces:
        for event in parser.feed(piece):
            if event.data != "[DONE]":
                acc.add(WireCompletion.model_validate_json(event.data))
    return acc.chunks


def timed(fn, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000, help="SSE chunks per response")
    parser.add_argument("--calls", type=int, default=30, help="calls per side (after 3 warm-up calls)")
    opts = parser.parse_args()
    request = ModelRequest(model="bench", messages=(Message(role="user", content="go"),), max_tokens=10_000,
                           max_payload_bytes=10_000_000, deadline_s=60)
    body = json.dumps(request.wire_body()).encode()
    print(f"{'stream':<10} {'chunks':>6} {'raw httpx ms':>13} {'client ms':>10} {'ratio':>6} "
          f"{'overhead us/chunk':>18} {'pure pipeline us/chunk':>23}")
    for name, reply in scenarios(opts.chunks).items():
        proc, url = start_server(reply)
        try:
            limits = httpx.Limits(max_keepalive_connections=0)  # same connection policy as the client
            with httpx.Client(limits=limits) as http, ModelClient(url, token_estimator=lambda s: 0) as client:
                env = client.call(request)
                assert env.status is Status.COMPLETED, env.error
                pieces = capture(http, url, body)
                n_events = sum(p.count(b"data: ") for p in pieces)
                for _ in range(3):
                    raw_httpx(http, url, body)
                    client.call(request)
                raw_s, client_s = [], []
                for _ in range(opts.calls):  # interleave, so drift on a shared machine hits both sides
                    raw_s += timed(partial(raw_httpx, http, url, body), 1)
                    client_s += timed(lambda: client.call(request), 1)
                pure_s = timed(partial(offline_pipeline, pieces, 10_000_000), opts.calls)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        raw_ms, client_ms = statistics.median(raw_s) * 1e3, statistics.median(client_s) * 1e3
        per_chunk = (client_ms - raw_ms) * 1e3 / n_events
        pure = statistics.median(pure_s) * 1e6 / n_events
        print(f"{name:<10} {n_events:>6} {raw_ms:>13.2f} {client_ms:>10.2f} {client_ms / raw_ms:>6.2f} "
              f"{per_chunk:>18.1f} {pure:>23.1f}")
    print("overhead = (client - raw) / chunks; pure pipeline = SSE parse + wire validation + monitor on captured bytes")


if __name__ == "__main__":
    main()
