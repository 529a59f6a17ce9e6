"""Prompt ids are stored linearly (what each prompt adds to the last) in the
hash chain, and read back whole."""

from __future__ import annotations

import json
import random

from sqlalchemy import select

from orchestrator.contract import Message
from orchestrator.envelope import Envelope, Payload, Status, Usage
from store.schema.tables import ModelResponse, table_of
from store.store import Store
from store.write import synthetic
from store.write.recorder import Recorder
from tests.tokens.conftest import request


def envelope(prompt: list[int] | None, sampled: list[int]) -> Envelope:
    return Envelope(status=Status.COMPLETED, payload=Payload(text="ok"), finish_reason="stop",
                    usage=Usage(prompt_tokens=len(prompt or ()), completion_tokens=len(sampled),
                                prompt_source="server", completion_source="server"),
                    prompt_token_ids=None if prompt is None else tuple(prompt), completion_token_ids=tuple(sampled))


def record(store: Store, prompts: list[list[int] | None], *, recorder: Recorder | None = None,
           run_id: str | None = None, first_turn: int = 0) -> str:
    recorder = recorder or Recorder(store)
    run_id = run_id or synthetic.start(recorder, random.Random(3))
    for n, prompt in enumerate(prompts):
        turn = first_turn + n
        with recorder.turn(run_id, turn) as tx:
            call_id = tx.request(request(turn, logprobs=False))
            tx.envelope(call_id, envelope(prompt, [900 + turn, 1]))
            tx.commit([Message(role="assistant", content="ok")])
    return run_id


def stored(store: Store, run_id: str) -> list[dict]:
    t = table_of(ModelResponse)
    with store.read() as conn:
        rows = conn.execute(select(t.c.envelope_json).where(t.c.run_id == run_id).order_by(t.c.seq)).scalars()
        return [json.loads(r) for r in rows]


def read_back(store: Store, run_id: str) -> list[tuple[int, ...] | None]:
    trajectory = store.trajectory(run_id)
    return [c.response.envelope().prompt_token_ids for r in trajectory.turns for c in r.calls if c.response]


def growing_prompts(turns: int, added: int = 40) -> list[list[int]]:
    prompts, prompt = [], [2]
    for turn in range(turns):
        prompt = prompt + [900 + turn - 1, 1] * (turn > 0) + list(range(10 * turn, 10 * turn + added))
        prompts.append(list(prompt))
    return prompts


def test_each_envelope_stores_what_its_prompt_adds_and_reads_back_whole(tmp_path):
    prompts = growing_prompts(6)
    with Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run_id = record(store, prompts)
        rows = stored(store, run_id)
        assert rows[0]["prompt_token_ids"] == prompts[0] and "prompt_token_ids_delta" not in rows[0]
        for n in range(1, 6):
            delta = rows[n]["prompt_token_ids_delta"]
            assert rows[n]["prompt_token_ids"] is None
            assert delta["keep"] == len(prompts[n - 1]) and len(delta["ids"]) == 2 + 40
        assert read_back(store, run_id) == [tuple(p) for p in prompts]
        assert store.verify(run_id).ok


def test_stored_ids_grow_linearly_with_the_turns(tmp_path):
    def stored_ids(turns: int) -> int:
        with Store.open(f"sqlite:///{tmp_path / f'{turns}.db'}") as store:
            run_id = record(store, growing_prompts(turns))
            return sum(len(r.get("prompt_token_ids") or r["prompt_token_ids_delta"]["ids"])
                       for r in stored(store, run_id))
    ten, fifty = stored_ids(10), stored_ids(50)
    assert ten == 1 + 40 + 9 * 42 and fifty == 1 + 40 + 49 * 42  # exactly what each prompt added


def test_a_prompt_that_rewrites_history_keeps_the_common_prefix_only(tmp_path):
    prompts = [[2, 3, 4, 5, 6], [2, 3, 9, 9], None, [2, 3, 9, 9, 7]]
    with Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run_id = record(store, prompts)
        rows = stored(store, run_id)
        assert rows[1]["prompt_token_ids_delta"] == {"keep": 2, "ids": [9, 9]}
        assert rows[2]["prompt_token_ids"] is None and "prompt_token_ids_delta" not in rows[2]
        assert rows[3]["prompt_token_ids_delta"] == {"keep": 4, "ids": [7]}  # against the last prompt with ids
        assert read_back(store, run_id) == [(2, 3, 4, 5, 6), (2, 3, 9, 9), None, (2, 3, 9, 9, 7)]


def test_a_prompt_with_nothing_in_common_is_stored_whole(tmp_path):
    with Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run_id = record(store, [[2, 3], [5, 6]])
        assert stored(store, run_id)[1]["prompt_token_ids"] == [5, 6]


def test_a_new_recorder_that_never_saw_the_last_prompt_stores_whole_ids(tmp_path):
    prompts = growing_prompts(4)
    with Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run_id = record(store, prompts[:2])
        record(store, prompts[2:], recorder=Recorder(store), run_id=run_id, first_turn=2)
        rows = stored(store, run_id)
        assert rows[2]["prompt_token_ids"] == prompts[2] and "prompt_token_ids_delta" in rows[3]
        assert read_back(store, run_id) == [tuple(p) for p in prompts]


def test_the_delta_is_in_the_hash_chain(tmp_path):
    from sqlalchemy import update

    with Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run_id = record(store, growing_prompts(3))
        t = table_of(ModelResponse)
        with store.write() as conn:
            row = conn.execute(select(t.c.id, t.c.envelope_json).where(t.c.run_id == run_id)
                               .order_by(t.c.seq.desc()).limit(1)).one()
            conn.execute(update(t).where(t.c.id == row.id).values(
                envelope_json=row.envelope_json.replace('"keep":', '"keep":1', 1)))
        assert not store.verify(run_id).ok
