"""Token ids: what the drift check costs and how stored ids grow.

1. Stored id bytes against turns: runs of 10 and 50 turns, each prompt the
   last prompt + the sampled ids + what the template and the tool add, as a
   token-faithful engine returns them, recorded through the real Recorder.
   The bytes of ids in the stored envelopes are printed with the delta
   (``store/write/token_ids.py``) and as they would be whole; the claim is that a
   50-turn run stores at most 5.5x a 10-turn run's (linear; whole ids grow
   with the square).
2. ``escrow tokens`` on a 200-turn run (final prompt of about 60,000 ids):
   the drift check through ``Store.run_tokens`` and as the CLI's own
   function; the claim is under 1 s.

Usage: .venv/bin/python bench/bench_tokens.py [--added 300] [--sampled 100]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

from sqlalchemy import select

from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope, Payload, Status, Usage
from store import Recorder, Store
from store.schema.tables import ModelResponse, table_of
from store.write import synthetic


def logprob_entries(ids: list[int]) -> list[dict]:
    return [{"id": i, "token": f"t{i}", "logprob": -0.5, "top_logprobs": []} for i in ids]


def record(store: Store, turns: int, added: int, sampled: int) -> str:
    recorder = Recorder(store)
    rng = random.Random(turns)
    run_id = synthetic.start(recorder, rng)
    prompt = [2] + [rng.randrange(1000, 250000) for _ in range(added)]
    for turn in range(turns):
        answer = [rng.randrange(1000, 250000) for _ in range(sampled - 1)] + [106]
        envelope = Envelope(
            status=Status.COMPLETED, payload=Payload(text="x" * sampled), finish_reason="stop",
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(answer), prompt_source="server",
                        completion_source="server"),
            logprobs=logprob_entries(answer), top_logprobs=0,
            prompt_token_ids=tuple(prompt), completion_token_ids=tuple(answer))
        request = ModelRequest(model="gemma-3-270m", messages=(Message(role="user", content=f"turn {turn}"),),
                               max_tokens=sampled, sampling=Sampling(logprobs=True, top_logprobs=0))
        with recorder.turn(run_id, turn) as tx:
            call_id = tx.request(request)
            tx.envelope(call_id, envelope)
            tx.commit([Message(role="assistant", content="x")])
        prompt = prompt + answer + [107, 105] + [rng.randrange(1000, 250000) for _ in range(added)]
    recorder.finish_run(run_id, "PASS", "bench", turn=turns)
    return run_id


def id_bytes(store: Store, run_id: str) -> tuple[int, int]:
    """(bytes of prompt ids as stored, bytes they would take whole)."""
    t = table_of(ModelResponse)
    with store.read() as conn:
        texts = list(conn.execute(select(t.c.envelope_json).where(t.c.run_id == run_id).order_by(t.c.seq)).scalars())
    stored = 0
    for text in texts:
        data = json.loads(text)
        part = data.get("prompt_token_ids") or data.get("prompt_token_ids_delta")
        stored += len(json.dumps(part, separators=(",", ":")))
    whole = sum(len(json.dumps(list(c.response.envelope().prompt_token_ids or ()), separators=(",", ":")))
                for r in store.trajectory(run_id).turns for c in r.calls if c.response is not None)
    return stored, whole


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--added", type=int, default=200, help="ids the template and tool add a turn")
    parser.add_argument("--sampled", type=int, default=100, help="ids sampled a turn")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(f"sqlite:///{Path(folder) / 'bench.db'}")
        sizes = {}
        for turns in (10, 50):
            run_id = record(store, turns, args.added, args.sampled)
            sizes[turns] = id_bytes(store, run_id)
        print("1. stored prompt-id bytes (delta, whole):")
        for turns, (stored, whole) in sizes.items():
            print(f"   {turns:>3} turns: {stored:>12,} B stored   {whole:>12,} B whole")
        ratio = sizes[50][0] / sizes[10][0]
        print(f"   50 / 10 turns: stored {ratio:.2f}x (claim <= 5.5x)   whole {sizes[50][1] / sizes[10][1]:.2f}x")

        run_id = record(store, 200, args.added, args.sampled)
        final = store.run_tokens(run_id)
        longest = max(c.prompt_ids or 0 for c in final.calls)
        started, cpu = time.perf_counter(), time.process_time()
        report = store.run_tokens(run_id)
        api_s, api_cpu = time.perf_counter() - started, time.process_time() - cpu
        from cli.tokens_cmd import tokens

        started, cpu = time.perf_counter(), time.process_time()
        with redirect_stdout(io.StringIO()):
            tokens(run=run_id, model_url=None, rebuild=False, as_json=True, db=store.url, config=None)
        cli_s, cli_cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"2. escrow tokens, 200 turns, longest prompt {longest:,} ids: {report.summary()}")
        print(f"   Store.run_tokens {api_s:.3f} s wall, {api_cpu:.3f} s CPU   the command (--json) {cli_s:.3f} s "
              f"wall, {cli_cpu:.3f} s CPU   (claim < 1 s; wall includes waiting on a loaded machine)")
        store.close()


if __name__ == "__main__":
    main()
