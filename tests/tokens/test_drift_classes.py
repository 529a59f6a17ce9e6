"""The drift check's classes and length checks, on ids written out by hand
for the shapes agentic-RL stacks hit in public (verl's dropped separator,
NeMo Gym's re-encoded tool call, a template that strips past reasoning)."""

from __future__ import annotations

from orchestrator.token_drift import CallIds, TokenClass, classify, first_difference

EOT, NL, USER, TOOL = 106, 107, 105, 200


def call(n: int, prompt, sampled, *, status="COMPLETED", **fields) -> CallIds:
    return CallIds(call_id=f"c{n}", turn=n, status=status, prompt_ids=None if prompt is None else tuple(prompt),
                   sampled_ids=None if sampled is None else tuple(sampled), **fields)


def classes(calls) -> list[str]:
    return [c.token_class.value for c in classify(calls)]


def test_prompts_that_extend_prompt_and_sampled_ids_are_clean():
    first = call(1, [2, 10, 11], [30, 31, EOT])
    second = call(2, [2, 10, 11, 30, 31, EOT, NL, USER, 40], [50, EOT])
    third = call(3, [*second.prompt_ids, 50, EOT, NL, TOOL, 41], [60])
    checks = classify([first, second, third])
    assert [c.token_class for c in checks] == [TokenClass.CLEAN] * 3
    assert [c.against for c in checks] == [None, "c1", "c2"]
    assert all(c.drift is None and not c.problems for c in checks)


def test_a_different_end_of_turn_token_realigns():
    # The engine sampled <eos> (1); the template writes <end_of_turn>\n instead.
    first = call(1, [2, 10], [30, 31, 1])
    second = call(2, [2, 10, 30, 31, EOT, NL, USER], [50])
    check = classify([first, second])[1]
    assert check.token_class is TokenClass.REALIGN
    assert check.drift is not None and check.drift.position == 4 and check.drift.within == "sampled"
    assert check.drift.expected == (1,) and check.drift.got[:1] == (EOT,)


def test_a_re_encoded_answer_forks_at_the_first_changed_id():
    # Two sampled ids (" fo" "o") re-encode as one (" foo"): the next prompt drifts mid-answer.
    first = call(1, [2, 10], [30, 31, 32, 33, EOT], sampled_tokens=(" fo", "o", " bar", "!", "<eot>"))
    second = call(2, [2, 10, 99, 32, 33, EOT, NL], [50])
    check = classify([first, second])[1]
    assert check.token_class is TokenClass.FORK
    assert check.drift is not None and check.drift.position == 2 and check.drift.within == "sampled"
    # Without a tokenizer the sampled side is still shown from the recorded tokens.
    assert check.drift.expected_text == " foo bar!<eot>" and check.drift.got_text is None


def test_a_template_that_strips_past_reasoning_forks_inside_the_earlier_prompt():
    first = call(1, [2, 10, 70, 71, 72, EOT, 11], [30, EOT])  # 70-72: an earlier turn's reasoning
    second = call(2, [2, 10, EOT, 11, 30, EOT, NL], [50])
    check = classify([first, second], decode=lambda ids: "|".join(map(str, ids)))[1]
    assert check.token_class is TokenClass.FORK
    assert check.drift is not None and (check.drift.position, check.drift.within) == (2, "prompt")
    assert check.drift.expected_text == "70|71|72|106|11|30|106" and check.drift.got_text.startswith("106|11")


def test_compaction_that_shortens_the_prompt_forks():
    first = call(1, list(range(2, 40)), [50, EOT])
    second = call(2, [2, 3, 900, EOT, NL], [60])
    assert classes([first, second]) == ["CLEAN", "FORK"]


def test_a_prompt_that_stops_inside_the_end_of_turn_is_a_fork_not_a_realign():
    first = call(1, [2, 10], [30, 31, 1])
    second = call(2, [2, 10, 30, 31], [50])  # the answer's last id is missing and nothing follows
    assert classes([first, second]) == ["CLEAN", "FORK"]


def test_absent_ids_are_absent_and_the_next_call_compares_with_the_last_call_that_had_them():
    first = call(1, [2, 10], [30, EOT])
    blind = call(2, None, None)
    no_sampled = call(3, [2, 10, 30, EOT, NL], None)
    after = call(4, [2, 10, 30, EOT, NL, 40], [41])
    checks = classify([first, blind, no_sampled, after])
    assert [c.token_class.value for c in checks] == ["CLEAN", "ABSENT", "ABSENT", "CLEAN"]
    assert checks[3].against == "c1"


def test_a_failed_call_with_prompt_ids_is_classified_but_continues_nothing():
    first = call(1, [2, 10], [30, EOT])
    faulted = call(2, [2, 10, 30, EOT, 5], None, status="FAULTED")
    after = call(3, [2, 10, 30, EOT, 5, 6], [7])
    checks = classify([first, faulted, after])
    assert [c.token_class.value for c in checks] == ["CLEAN", "CLEAN", "CLEAN"]
    assert checks[2].against == "c1"


def test_a_quarantined_answer_is_not_continued_and_the_retry_is_clean():
    truncated = call(1, [2, 10], [30, 31, 32], status="TRUNCATED")
    retry = call(2, [2, 10, 5, 6], [40, EOT])  # the notice, not the truncated answer
    check = classify([truncated, retry])[1]
    assert check.token_class is TokenClass.CLEAN and check.retry_of == "c1"


def test_a_kept_answer_that_is_dropped_from_the_next_prompt_forks():
    first = call(1, [2, 10], [30, 31, EOT])
    second = call(2, [2, 10, 5, 6], [40])
    check = classify([first, second])[1]
    assert check.token_class is TokenClass.FORK and check.retry_of is None


def test_length_checks_against_the_engines_own_figures():
    good = call(1, [2, 10, 11], [30, 31], usage_prompt=3, usage_completion=2, logprobs=2)
    assert classify([good])[0].problems == ()
    bad = call(1, [2, 10, 11], [30, 31], usage_prompt=4, usage_completion=3, logprobs=1)
    assert classify([bad])[0].problems == (
        "3 prompt ids, usage.prompt_tokens 4",
        "2 sampled ids, usage.completion_tokens 3",
        "1 logprobs for 2 sampled ids",
    )


def test_negative_and_out_of_vocabulary_ids_are_problems():
    bad = call(1, [2, -1, 11], [30, 262144])
    problems = classify([bad], vocab_size=262144)[0].problems
    assert problems == ("prompt id -1 at position 1 is negative",
                        "sampled id 262144 at position 1 is out of the vocabulary (262144)")
    assert classify([bad])[0].problems == ("prompt id -1 at position 1 is negative",)


def test_a_decoder_that_fails_shows_no_text_and_does_not_raise():
    def decode(ids):
        raise ValueError("out of vocabulary")
    first = call(1, [2, 10], [30, EOT])
    second = call(2, [2, 11, 30], [1])
    check = classify([first, second], decode=decode)[1]
    assert check.drift is not None and check.drift.expected_text is None and check.drift.got_text is None


def testfirst_difference_agrees_with_a_plain_scan():
    import random

    rng = random.Random(7)
    for _ in range(500):
        a = [rng.randrange(4) for _ in range(rng.randrange(0, 40))]
        b = list(a[: rng.randrange(0, len(a) + 1)]) + [rng.randrange(4) for _ in range(rng.randrange(0, 5))]
        plain = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert first_difference(tuple(a), tuple(b)) == plain
