"""The fault server serves each key its own script under /k/KEY/v1, whatever
the order requests arrive in; plain /v1 keeps the shared queue."""

from __future__ import annotations

import threading
import time

import httpx

from orchestrator.adapters.fault_server import FaultServer, Reply


def ask(url: str) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": [], "stream": False}, timeout=10)


def text(response: httpx.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


def test_each_key_plays_its_own_script_in_order(fault_server: FaultServer):
    fault_server.script_for("a", [Reply(text="a1"), Reply(text="a2")])
    fault_server.script_for("b", [Reply(text="b1")])
    fault_server.script([Reply(text="shared")])
    a, b = fault_server.keyed_url("a"), fault_server.keyed_url("b")
    assert [text(ask(a)), text(ask(b)), text(ask(fault_server.base_url)), text(ask(a))] == ["a1", "b1", "shared", "a2"]
    assert [r.path for r in fault_server.requests] == [
        "/k/a/v1/chat/completions", "/k/b/v1/chat/completions", "/v1/chat/completions", "/k/a/v1/chat/completions"]
    # /v1/models answers under a key too (clients discover the window there).
    assert httpx.get(f"{a}/models", timeout=10).json()["data"][0]["id"] == fault_server.model


def test_an_exhausted_or_unknown_key_is_a_500_naming_the_key(fault_server: FaultServer):
    fault_server.script_for("a", [Reply(text="a1")])
    ask(fault_server.keyed_url("a"))
    for key in ("a", "nobody"):
        response = ask(fault_server.keyed_url(key))
        assert response.status_code == 500 and f"for key {key!r}" in response.json()["error"]["message"]


def say(url: str, *messages: dict) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": list(messages), "stream": False},
                      timeout=10)


OPENING = ({"role": "system", "content": "s"}, {"role": "user", "content": "the task"})
LATER = (*OPENING, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "go on"})


def test_a_restarting_key_plays_its_script_from_the_start_for_each_new_conversation(fault_server: FaultServer):
    fault_server.script_for("t", [Reply(text="t1"), Reply(text="t2")], restart=True)
    url = fault_server.keyed_url("t")
    assert [text(say(url, *OPENING)), text(say(url, *LATER))] == ["t1", "t2"]  # a whole run
    assert text(say(url, *OPENING)) == "t1"  # a second run: from the start, not "exhausted"
    # An interrupted run (one step played) does not shift the next run either.
    assert [text(say(url, *OPENING)), text(say(url, *LATER))] == ["t1", "t2"]
    assert say(url, *LATER).status_code == 500  # within one run the script still runs out


def test_a_plain_key_shares_its_queue_between_conversations(fault_server: FaultServer):
    fault_server.script_for("t", [Reply(text="t1"), Reply(text="t2")])
    url = fault_server.keyed_url("t")
    assert [text(say(url, *OPENING)), text(say(url, *OPENING))] == ["t1", "t2"]
    assert say(url, *OPENING).status_code == 500


def test_a_held_reply_waits_for_its_release_and_later_ones_pass(fault_server: FaultServer):
    held = Reply(text="held", delay_s=120.0, released_by="go")
    fault_server.script([held, held])
    answers: list[str] = []
    asking = threading.Thread(target=lambda: answers.append(text(ask(fault_server.base_url))))
    asking.start()
    for _ in range(100):  # the server has the request: it is holding it
        if fault_server.requests:
            break
        time.sleep(0.1)
    asking.join(timeout=1.0)
    assert asking.is_alive() and answers == []
    fault_server.release("go")
    asking.join(timeout=30)
    assert answers == ["held"]
    # Released stays released: the next held reply is not held at all.
    assert text(httpx.post(f"{fault_server.base_url}/chat/completions",
                           json={"model": "m", "messages": [], "stream": False}, timeout=30)) == "held"
