"""Comparing two runs that part early reads whole only the requests of the
first divergent turn; every other turn is compared through outlines and
names the same first differing field as the whole requests do."""

from __future__ import annotations

from cli.view.compare import align, with_requests
from cli.view.jinja_pages import Links
from cli.view.site import Site
from store import Recorder, Store
from store.write import synthetic
from tests.view.recorded import record_reasoning_run


def summary(comparison):
    first = comparison.first_divergence
    turns = [
        (t.turn, t.difference.kind, t.difference.field) if t.difference else (t.turn, None, None)
        for t in comparison.turns
    ]
    head = (first.turn, first.difference.kind, first.difference.fields, first.difference.diff) if first else None
    return turns, head


def test_early_divergence_reads_one_turns_requests_and_names_every_field(store: Store) -> None:
    recorder = Recorder(store)
    runs = {
        "tail 12": record_reasoning_run(store, turns=12),
        "tail 14": record_reasoning_run(store, turns=14),
        "seed 1": synthetic.record_run(recorder, turns=12, seed=1),
        "seed 2": synthetic.record_run(recorder, turns=12, seed=2),
    }
    site = Site(store, Links(static=False))
    read: list[list[str]] = []
    whole_requests = store.requests

    def requests(call_ids: list[str]) -> dict[str, str]:
        read.append(list(call_ids))
        return whole_requests(call_ids)

    store.requests = requests  # type: ignore[method-assign]
    later_request_fields = 0
    for a, b in (("tail 12", "tail 14"), ("seed 1", "seed 2"), ("tail 12", "seed 1"), ("seed 2", "tail 14")):
        left, right = (store.turn_slice(runs[name], tails=False, detail=False).trajectory for name in (a, b))
        texts = whole_requests([c.id for t in (left, right) for r in t.turns for c in r.calls])
        expected = align(with_requests(left, texts), with_requests(right, texts))  # every request read whole
        read.clear()
        got = site.aligned(left, right)
        assert summary(got) == summary(expected), (a, b)
        first = expected.first_divergence
        assert first is not None and first.turn <= 1, (a, b)
        first_calls = {c.id for t in (left, right) for r in t.turns if r.turn == first.turn for c in r.calls}
        assert {i for ids in read for i in ids} <= first_calls, (a, b)
        later_request_fields += sum(
            1 for t in got.turns if t.turn > first.turn and t.difference and t.difference.kind == "request"
        )
    assert later_request_fields > 20
