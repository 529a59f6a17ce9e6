"""Writes a schema-3 store with today's code (run at commit 368c2d6)."""
import sqlite3
import sys
from contextlib import closing

from orchestrator.contract import Message
from store import Recorder, Store
from store.write import synthetic

path = sys.argv[1]
with Store.open(f"sqlite:///{path}") as store:
    rec = Recorder(store)
    assert store.schema_version == 3
    for seed in range(6):
        synthetic.record_run(rec, turns=5, seed=seed, model=("gemma-3-270m", "qwen3-0.6b")[seed % 2])
    unfinished = synthetic.record_run(rec, turns=2, seed=99, finish=False)
    first = rec.record_request(
        unfinished, 2, synthetic.request_for(2, [Message(role="user", content="nul \x00 byte, é, \u2028")])
    )
    rec.record_request(
        unfinished,
        2,
        synthetic.request_for(2, [Message(role="user", content="nul \x00 byte, é, \u2028")]),
        attempt_of=first,
    )
with closing(sqlite3.connect(path)) as conn:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("VACUUM")
