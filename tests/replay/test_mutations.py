"""Mutation test: one changed byte in the recorded system prompt, a tool
definition, a sampling setting or a recorded observation is reported at
exactly the right turn and field. The recording is altered with plain SQL in
a copy of a real store (so the chain breaks, and replay needs force)."""

from __future__ import annotations

import json
import random
import sqlite3
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.replay import Replayer
from store import Store
from tests.replay.recording import record_varied_runs

SEED = 20261129
PER_KIND = 32
CHARS = string.ascii_letters + string.digits + " .,:;-_()[]{}"


@dataclass(frozen=True)
class Mutation:
    run_id: str
    table: str
    row_id: str
    column: str
    text: str
    turn: int
    field: str
    kind: str


def one_char(rng: random.Random, text: str) -> str:
    at = rng.randrange(len(text))
    return text[:at] + rng.choice([c for c in CHARS if c != text[at]]) + text[at + 1:]


def string_leaves(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from string_leaves(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from string_leaves(item, f"{path}[{index}]")
    elif isinstance(value, str) and value:
        yield path, value


def set_at(value: Any, path: str, new: Any) -> None:
    steps = [s for part in path.replace("]", "").split(".") for s in part.split("[") if s]
    *head, last = [int(s) if s.isdigit() else s for s in steps]
    for step in head:
        value = value[step]
    value[last] = new


def mutate_number(rng: random.Random, key: str, value: Any) -> Any:
    if value is None:
        return rng.choice([1, 40]) if key in ("seed", "top_k") else rng.choice([0.5, 0.9])
    if isinstance(value, bool):
        return not value
    text = json.dumps(value)
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    at = rng.choice(digits)
    new = text[:at] + rng.choice([d for d in string.digits if d != text[at]]) + text[at + 1:]
    return json.loads(new)


def rank(names: list[str]) -> list[int]:
    return sorted(range(len(names)), key=names.__getitem__)


def spec_mutations(rng: random.Random, store: Store, run_id: str) -> Iterator[Mutation]:
    config = store.run(run_id).config
    spec = config["spec"]
    for _ in range(PER_KIND):
        changed = json.loads(json.dumps(config))
        changed["spec"]["system"] = one_char(rng, spec["system"])
        yield Mutation(run_id, "runs", run_id, "config_json", json.dumps(changed), 0, "messages[0].content", "system")
    leaves = list(string_leaves(spec["tool_specs"], ""))
    made = 0
    while made < PER_KIND:
        path, text = rng.choice(leaves)
        changed = json.loads(json.dumps(config))
        set_at(changed["spec"]["tool_specs"], path, one_char(rng, text))
        # The context sends tools sorted by name: a renamed tool must keep its place to be named by index.
        names = [t["name"] for t in changed["spec"]["tool_specs"]]
        if rank(names) != rank([t["name"] for t in spec["tool_specs"]]):
            continue
        index = int(path[1:path.index("]")])
        sent_at = sorted(names).index(names[index])
        made += 1
        yield Mutation(run_id, "runs", run_id, "config_json", json.dumps(changed), 0,
                       f"tools[{sent_at}]" + path[path.index("]") + 1:], "tool")
    for _ in range(PER_KIND):
        key = rng.choice(["temperature", "seed", "top_p", "top_k", "logprobs"])
        changed = json.loads(json.dumps(config))
        changed["spec"]["sampling"][key] = mutate_number(rng, key, spec["sampling"][key])
        yield Mutation(run_id, "runs", run_id, "config_json", json.dumps(changed), 0, f"sampling.{key}", "sampling")


def observation_mutations(rng: random.Random, store: Store, run_ids: list[str]) -> Iterator[Mutation]:
    pool = []
    for run_id in run_ids:
        trajectory = store.trajectory(run_id)
        last = max(r.turn for r in trajectory.turns if r.calls)
        by_turn = {r.turn: r for r in trajectory.turns}
        for record in trajectory.turns:
            for row in record.tool_executions:
                candidate = next(c for c in record.candidates if c.id == row.candidate_id)
                if candidate.state == "REJECTED":
                    pool.append((run_id, row, record.turn, f"tool_calls[{candidate.candidate_index}].observation"))
                elif record.turn < last:
                    call_id = json.loads(candidate.tool_call_json)["id"]
                    messages = json.loads(by_turn[record.turn + 1].calls[0].request_json)["messages"]
                    k = next(i for i, m in enumerate(messages) if m.get("tool_call_id") == call_id)
                    pool.append((run_id, row, record.turn + 1, f"messages[{k}].content"))
    for _ in range(PER_KIND + 8):
        run_id, row, turn, field = rng.choice(pool)
        yield Mutation(run_id, "tool_executions", row.id, '"gen_ai.tool.call.result"', one_char(rng, row.observation),
                       turn, field, "observation")


@pytest.fixture(scope="module")
def mutable(tmp_path_factory: pytest.TempPathFactory, fault_server_session: FaultServer) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("mutations") / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        return db, record_varied_runs(store, fault_server_session)


@pytest.mark.slow
def test_every_one_byte_mutation_is_reported_at_its_turn_and_field(mutable):
    db, runs = mutable
    rng = random.Random(SEED)
    with Store.open(f"sqlite:///{db}", synchronous="NORMAL") as store:
        mutations = [*spec_mutations(rng, store, runs["fixing"]),
                     *observation_mutations(rng, store, [runs["fixing"], runs["perimeter_and_turn_limit"]])]
        assert len(mutations) >= 100 and {m.kind for m in mutations} == {"system", "tool", "sampling", "observation"}
        replayer = Replayer(store)
        sql = sqlite3.connect(db, isolation_level=None)
        misses = []
        for m in mutations:
            original = sql.execute(f"SELECT {m.column} FROM {m.table} WHERE id = ?", (m.row_id,)).fetchone()[0]
            sql.execute(f"UPDATE {m.table} SET {m.column} = ? WHERE id = ?", (m.text, m.row_id))
            try:
                report = replayer.offline(replayer.load(m.run_id, force=True), record=False)
            finally:
                sql.execute(f"UPDATE {m.table} SET {m.column} = ? WHERE id = ?", (original, m.row_id))
            found = report.divergence
            if found is None or (found.turn, found.field) != (m.turn, m.field):
                misses.append((m.kind, m.turn, m.field, found and (found.turn, found.field)))
        sql.close()
        assert not misses, misses[:5]
        assert store.verify(runs["fixing"]).ok  # every mutation was undone
