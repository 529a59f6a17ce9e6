"""Model calls held to a replica's slot count (orchestrator/composition/batch/call_slots.py),
against the real fault server on loopback: a call waits for a free slot
before it is sent, so its deadline (T_max) starts when the server can take it,
not while it queues behind other runs' calls."""

from __future__ import annotations

import threading

import pytest

from orchestrator.adapters.fault_server import Reply
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.provenance import EngineInfo
from orchestrator.composition.batch.call_slots import CallSlots, engine_slots
from orchestrator.context.tokenizer import TiktokenCounter
from orchestrator.contract import Message, ModelRequest
from orchestrator.envelope import Status
from orchestrator.ports import Model

REPLICA = "replica-a"
OFFLINE = TiktokenCounter("cl100k_base")


def gated(slots: CallSlots, client: ModelClient) -> Model:
    return slots.around(REPLICA, client, OFFLINE)[0]


def ask() -> ModelRequest:
    return ModelRequest(model="fault-model", messages=(Message(role="user", content="hi"),), max_tokens=32,
                        stream=True)


@pytest.mark.parametrize(("info", "slots"), [
    (EngineInfo(engine="llama.cpp", settings={"slots": 3}, evidence=("/props",)), 3),
    (EngineInfo(engine="llama-cpp-python", evidence=("/v1/models owned_by me",)), 1),
    (EngineInfo(engine="vllm", evidence=("/version",)), None),
    (EngineInfo(engine="llama.cpp", settings={"slots": "many"}, evidence=("/props",)), None),
    (None, None),
])
def test_the_slot_count_is_what_the_engine_says(info, slots):
    assert engine_slots(info) == slots


@pytest.mark.parametrize("limit", [1, 2])
def test_calls_in_flight_never_exceed_the_limit(fault_server, limit):
    """Each reply streams slowly; with the gate, call k+limit reaches the server
    only after call k's stream was sent whole."""
    calls = 5
    fault_server.script([Reply(text="word " * 12, tokens_per_s=60.0, chunk_chars=5)] * calls)
    slots = CallSlots(limit)
    envelopes = []

    def one() -> None:
        with ModelClient(fault_server.base_url) as client:
            envelopes.append(gated(slots, client).call(ask()))

    threads = [threading.Thread(target=one) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [e.status for e in envelopes] == [Status.COMPLETED] * calls
    arrived = sorted(r.received_at for r in fault_server.requests if r.path.endswith("/chat/completions"))
    finished = sorted(s.sent_at[-1] for s in fault_server.streams)
    assert len(arrived) == len(finished) == calls
    # At each arrival, at most limit-1 earlier calls are still streaming.
    for at in arrived:
        in_flight = sum(a < at for a in arrived) - sum(f < at for f in finished)
        assert in_flight <= limit - 1, (at, arrived, finished)


def test_without_a_known_slot_count_calls_are_not_held(fault_server):
    """An engine that does not say (the fault server): no gate, both calls at the server at once."""
    release = threading.Event()
    fault_server.script([Reply(text="x", delay_s=30.0), Reply(text="y")])
    slots = CallSlots(None)
    results = []

    def slow() -> None:
        with ModelClient(fault_server.base_url) as client:
            results.append(gated(slots, client).call(ask(), cancel=release))

    first = threading.Thread(target=slow)
    first.start()
    while not fault_server.requests:  # the first call is at the server, stalled
        threading.Event().wait(0.05)
    with ModelClient(fault_server.base_url) as client:
        second = gated(slots, client).call(ask())
    release.set()
    first.join()
    assert second.status is Status.COMPLETED and second.payload.text == "y"
    assert results[0].status is Status.CANCELED


def test_a_call_cancelled_while_queued_is_never_sent(fault_server):
    fault_server.script([Reply(text="x", delay_s=30.0)])
    slots = CallSlots(1)
    hold, stop_first = threading.Event(), threading.Event()

    def holder() -> None:
        with ModelClient(fault_server.base_url) as client:
            hold.set()
            gated(slots, client).call(ask(), cancel=stop_first)

    first = threading.Thread(target=holder)
    first.start()
    hold.wait()
    while not fault_server.requests:  # the first call holds the one slot, at the server
        threading.Event().wait(0.05)
    queued_cancel = threading.Event()
    queued_cancel.set()
    with ModelClient(fault_server.base_url) as client:
        queued = gated(slots, client).call(ask(), cancel=queued_cancel)
    sent = len(fault_server.requests)
    stop_first.set()
    first.join()
    assert queued.status is Status.CANCELED and sent == 1


class CountingTokenizer:
    """A server-tokenizer stand-in that records how many counts run at once."""

    name = "server:llama_cpp:gemma-3-270m"

    def __init__(self) -> None:
        self.lock, self.now, self.most = threading.Lock(), 0, 0
        self.entered = threading.Event()

    def count(self, text: str) -> int:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        self.entered.set()
        with self.lock:
            self.now -= 1
        return len(text)


def test_a_server_tokenizer_waits_for_the_slot_a_call_holds(fault_server):
    """llama-cpp-python answers a tokenize request only between completions: a
    count is held while another run's call has the replica's one slot, and
    goes through once that call ends."""
    fault_server.script([Reply(text="x", delay_s=30.0)])
    slots = CallSlots(1)
    stop_call = threading.Event()
    tokenizer = CountingTokenizer()
    with ModelClient(fault_server.base_url) as client:
        model, counter = slots.around(REPLICA, client, tokenizer)
        assert slots.around(REPLICA, client, OFFLINE)[1] is OFFLINE  # offline counting needs no slot
        call = threading.Thread(target=lambda: model.call(ask(), cancel=stop_call))
        call.start()
        while not fault_server.requests:
            threading.Event().wait(0.05)
        counted: list[int] = []
        count = threading.Thread(target=lambda: counted.append(counter.count("four")))
        count.start()
        count.join(timeout=1.0)
        held_while_calling = count.is_alive() and not tokenizer.entered.is_set()
        stop_call.set()
        call.join()
        count.join()
    assert held_while_calling and counted == [4] and counter.name == tokenizer.name
