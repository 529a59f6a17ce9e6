"""The display's hooks into the core: the client tells a StreamObserver each
piece as it arrives (before the answer is over), reasoning is kept apart from
the words, a retry voids what an attempt streamed, and an ObservedJournal
records before it tells."""

from __future__ import annotations

import json

from orchestrator.adapters.fault_server import Fault, FaultServer, Reply, ScriptedToolCall
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.envelope import Envelope, Payload, Status
from orchestrator.observer import ObservedJournal


class Watcher:
    """Notes each hook call, and how many chunks the server had sent by then."""

    def __init__(self, server: FaultServer) -> None:
        self.server = server
        self.seen: list[tuple[str, str, int]] = []

    def on_attempt(self, number: int) -> None:
        self.seen.append(("attempt", str(number), -1))

    def on_delta(self, kind: str, text: str) -> None:
        streams = self.server.streams
        self.seen.append((kind, text, streams[-1].chunks_sent if streams else -1))

    def joined(self, kind: str) -> str:
        return "".join(text for k, text, _ in self.seen if k == kind)


def test_words_reach_the_observer_while_the_answer_streams(srv: FaultServer, req, fast_retry):
    srv.script([Reply(reasoning="think first", text="then answer in words", chunk_chars=2, tokens_per_s=80,
                      tool_calls=(ScriptedToolCall(name="read_file", arguments='{"path": "a.py"}'),))])
    watcher = Watcher(srv)
    with ModelClient(srv.base_url, retry=fast_retry, token_estimator=lambda t: len(t.split()), observer=watcher) as c:
        envelope = c.call(req("go"))
    assert envelope.status is Status.COMPLETED
    planned = srv.streams[0].planned_chunks
    first = next(sent for kind, _, sent in watcher.seen if kind == "text")
    assert first < planned  # the first words were told before the last chunk left the server
    kinds = [kind for kind, _, _ in watcher.seen if kind != "attempt"]
    assert kinds == sorted(kinds, key=["reasoning", "text", "tool"].index)  # in the order they arrived
    assert watcher.seen[0] == ("attempt", "1", -1)
    assert watcher.joined("text") == envelope.payload.text == "then answer in words"
    assert watcher.joined("reasoning") == envelope.payload.reasoning == "think first"
    assert watcher.joined("tool") == '{"path": "a.py"}'


def test_reasoning_of_a_whole_body_and_a_retry_that_voids_the_first_attempt(srv: FaultServer, req, fast_retry):
    srv.script([Fault.http(503), Reply(reasoning="hmm", text="done")])
    watcher = Watcher(srv)
    with ModelClient(srv.base_url, retry=fast_retry, token_estimator=lambda t: len(t.split()), observer=watcher) as c:
        envelope = c.call(req("go", stream=False))
    assert envelope.payload.reasoning == "hmm" and envelope.payload.text == "done"
    assert [s[:2] for s in watcher.seen] == [("attempt", "1"), ("attempt", "2"), ("reasoning", "hmm"), ("text", "done")]


def test_an_envelope_without_reasoning_keeps_its_recorded_bytes():
    plain = Envelope(status=Status.COMPLETED, payload=Payload(text="x"))
    assert "reasoning" not in json.loads(plain.model_dump_json())["payload"]
    thought = Envelope(status=Status.COMPLETED, payload=Payload(text="x", reasoning="r"))
    assert Envelope.model_validate_json(thought.model_dump_json()).payload.reasoning == "r"


class Ledger:
    """A Journal and a JournalObserver writing to one list."""

    def __init__(self, entries: list[str], who: str) -> None:
        self.entries, self.who = entries, who

    def __getattr__(self, name: str):
        def note(*args, **kwargs):
            self.entries.append(f"{self.who}.{name}")
            return f"ref-{name}"

        return note


def test_observed_journal_records_first_then_tells_and_returns_the_journals_refs():
    entries: list[str] = []
    journal = ObservedJournal(Ledger(entries, "journal"), Ledger(entries, "observer"))
    assert journal.request(0, None) == "ref-request"
    assert journal.candidate(0, "call", 0, None) == "ref-candidate"
    journal.envelope(0, "call", None, 0.0)
    journal.transition("cand", None)
    journal.tool("cand", "bash", None, None, None)
    journal.event(0, "route", {})
    journal.end_turn(0, ())
    assert entries == [f"{who}.{name}" for name in ("request", "candidate", "envelope", "transition", "tool", "event",
                                                    "end_turn") for who in ("journal", "observer")]
