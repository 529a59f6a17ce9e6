"""Search within a run reads only the turns SQL finds can match: it must
never miss a turn whose shown text contains the query, whatever the case,
escaping or Unicode of the text; and a turn read apart from its neighbours
shows the same messages as in the whole run."""

from __future__ import annotations

import random
import re

from cli.view.jinja_pages import Links
from cli.view.pages import matching, run_shown
from cli.view.site import Site
from store import Recorder, Store
from store.write import synthetic
from tests.view.recorded import record_reasoning_run

# Text whose shown form differs from its stored form: JSON escapes (quote,
# backslash, control character), characters that lower-case to ASCII letters
# (Kelvin sign, dotted capital I), and non-ASCII text.
ODD = 'Temperature 5 \u212aelvin in \u0130stanbul; said "hi"\x01 back\\slash, caf\u00e9 PyTest'
FIXED = ("kelvin", "5 kelvin", "\u0130stanbul", "istanbul", 'said "hi"', "back\\slash", "café", "pytest", "PYTEST",
         "turns left: 3", "contents 4", "step 7", "calc.py", "completed", "no response", "fix mean()", "You fix code",
         "tool_calls", "zzz-not-there", '"path": "calc.py"', "é")


def needles(turns, rng: random.Random) -> list[str]:
    """The fixed queries, and pieces of every turn's shown text, some upper-cased."""
    out = list(FIXED)
    for turn in turns:
        text = turn.haystack
        for _ in range(4):
            start = rng.randrange(max(1, len(text) - 3))
            piece = text[start:start + rng.randrange(2, 14)]
            out.append(piece.upper() if rng.random() < 0.3 else piece)
    return out


def test_search_misses_no_matching_turn_and_narrows(store: Store) -> None:
    runs = [
        record_reasoning_run(store, turns=12, reasoning=ODD),
        synthetic.record_run(Recorder(store), turns=12, seed=4),
    ]
    site = Site(store, Links(static=False))
    rng = random.Random(15)
    narrowed = checked = 0
    for run_id in runs:
        part = store.turn_slice(run_id)
        full = run_shown(part.trajectory, part.appended_before, part.last_messages)
        every = {t.turn for t in full.turns}
        for needle in needles(full.turns, rng):
            expected = {t.turn for t in matching(full.turns, needle)}
            found = store.search_turns(run_id, needle)
            candidates = every if found is None else set(found)
            assert expected <= candidates, (needle, expected - candidates)
            narrowed += len(candidates) < len(every)
            html = site.run_page(run_id, needle)
            shown = {int(n) for n in re.findall(r'<section class="turn[^"]*" id="turn-(\d+)"', html)}
            assert shown == expected, needle
            checked += 1
    assert checked > 100 and narrowed > checked // 4


def test_turns_read_apart_show_what_they_show_in_the_whole_run(store: Store) -> None:
    run_id = record_reasoning_run(store, turns=10, reasoning=ODD)
    part = store.turn_slice(run_id)
    full = {t.turn: t for t in run_shown(part.trajectory, part.appended_before, part.last_messages).turns}
    rng = random.Random(3)
    for _ in range(8):
        chosen = sorted(rng.sample(sorted(full), rng.randrange(1, 5)))
        apart = store.turn_slice(run_id, only=chosen)
        assert apart.appended is not None
        shown = run_shown(apart.trajectory, None, apart.last_messages, apart.appended).turns
        assert [t.turn for t in shown] == chosen
        for turn in shown:
            whole = full[turn.turn]
            assert (turn.new_messages, turn.tail, turn.opening) == (whole.new_messages, whole.tail, whole.opening), (
                turn.turn
            )
            assert turn.haystack == whole.haystack
