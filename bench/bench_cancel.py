"""Cancellation latency: how soon a call returns after its stream must stop,
for the three triggers (the stream monitor trips on a bad token, the payload
limit is reached, the caller cancels), against the fault server on loopback.

The contract asks for a return within 100 ms of the trigger; the tests assert
only causality (the stream stopped early, the server saw the hang-up), so this
is where the bound is measured. Printed per trigger: the median and worst
latency over the runs, the latency as a share of the 100 ms bound, and how
many times sooner the call returned than the uncut stream would have ended.

    .venv/bin/python bench/bench_cancel.py [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.retry import RetryPolicy
from orchestrator.contract import Message, ModelRequest

CHUNKS = 5000
RATE = 400.0  # chunks/s: an uncut stream lasts 12.5 s
BAD_AT = 200
BOUND_S = 0.1


def request(**fields: Any) -> ModelRequest:
    return ModelRequest(model="bench", messages=(Message(role="user", content="go"),), max_tokens=10_000,
                        deadline_s=60, **fields)


def bad_tool_call() -> Reply:
    head = '{"content": "'
    args = head + "a" * (BAD_AT - len(head) - 2) + '"}' + "}" + "b" * (CHUNKS - BAD_AT - 1)
    return Reply(tool_calls=(ScriptedToolCall(name="write_file", arguments=args),), chunk_chars=1, tokens_per_s=RATE)


def monitor_trip(srv: FaultServer, client: ModelClient) -> float:
    srv.script([bad_tool_call()])
    client.call(request())
    returned = time.monotonic()
    return returned - srv.streams[-1].sent_at[BAD_AT + 1]  # chunk 0 opens the call


def payload_limit(srv: FaultServer, client: ModelClient) -> float:
    srv.script([Reply(text="z" * CHUNKS, chunk_chars=1, tokens_per_s=RATE)])
    client.call(request(max_payload_bytes=100))
    returned = time.monotonic()
    return returned - srv.streams[-1].sent_at[100]  # the 101st byte crosses the limit


def external_cancel(srv: FaultServer, client: ModelClient) -> float:
    srv.script([Reply(text="w" * CHUNKS, chunk_chars=1, tokens_per_s=RATE)])
    cancel, fired = threading.Event(), []

    def fire() -> None:
        while not srv.streams or srv.streams[-1].chunks_sent < 50:
            time.sleep(0.001)
        fired.append(time.monotonic())
        cancel.set()

    threading.Thread(target=fire, daemon=True).start()
    client.call(request(), cancel=cancel)
    return time.monotonic() - fired[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="calls per trigger")
    opts = parser.parse_args()
    full_s = CHUNKS / RATE
    print(f"{'trigger':<16} {'median ms':>10} {'worst ms':>9} {'worst / 100 ms':>15} {'sooner than uncut':>18}")
    with FaultServer() as srv, ModelClient(srv.base_url, retry=RetryPolicy(max_attempts=1),
                                           token_estimator=lambda s: 0) as client:
        for name, trigger in (("monitor trip", monitor_trip), ("payload limit", payload_limit),
                              ("external cancel", external_cancel)):
            latencies = []
            for _ in range(opts.runs):
                srv.reset()
                latencies.append(trigger(srv, client))
            median, worst = statistics.median(latencies), max(latencies)
            print(f"{name:<16} {median * 1e3:>10.1f} {worst * 1e3:>9.1f} {worst / BOUND_S:>15.2f} "
                  f"{full_s / max(median, 1e-6):>17.0f}x")
    print(f"latency = return time - when the trigger's chunk left the server (or the cancel was set); "
          f"uncut stream = {full_s:.1f} s")


if __name__ == "__main__":
    main()
