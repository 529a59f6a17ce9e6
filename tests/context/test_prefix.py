from orchestrator.context import PromptBytes, prefix_report


def body(system: str, *contents: str, tools=({"name": "bash"},)) -> dict:
    messages = [{"role": "system", "content": system}] + [{"role": "user", "content": c} for c in contents]
    return {"messages": messages, "tools": list(tools)}


def test_a_timestamp_in_the_system_prompt_breaks_at_message_zero():
    prompts = [PromptBytes.from_wire_body(body(f"now={t}", "task", *["x"] * t)) for t in range(3)]
    report = prefix_report(prompts)
    for turn in report.turns[1:]:
        assert turn.break_in == "message" and turn.break_message == 0 and not turn.extends_stable
        assert turn.shared_bytes < len(prompts[0].records[0]) + len('{"content":"now=')+ 1


def test_appending_extends_exactly():
    a = PromptBytes.from_wire_body(body("s", "task"))
    b = PromptBytes.from_wire_body(body("s", "task", "more"))
    (_, turn) = prefix_report([a, b]).turns
    assert turn.shared_bytes == a.total_bytes and turn.break_offset is None and turn.break_message is None
    assert turn.extends_stable


def test_reordered_tools_break_in_the_tools_record():
    a = PromptBytes.from_wire_body(body("s", "t", tools=({"name": "a"}, {"name": "b"})))
    b = PromptBytes.from_wire_body(body("s", "t", tools=({"name": "b"}, {"name": "a"})))
    turn = prefix_report([a, b]).turns[1]
    assert turn.break_in == "tools" and turn.break_message is None and turn.break_offset == len('[{"name":"')


def test_tail_replacement_keeps_the_stable_part():
    a = PromptBytes.from_wire_body(body("s", "task", "left: 5"), tail_messages=1)
    b = PromptBytes.from_wire_body(body("s", "task", "obs", "left: 4"), tail_messages=1)
    turn = prefix_report([a, b]).turns[1]
    assert turn.break_message == 2 and turn.extends_stable
    assert turn.shared_bytes == a.stable_bytes + len('{"content":"')


def test_shared_share():
    a = PromptBytes.from_wire_body(body("s", "t"))
    report = prefix_report([a, a])
    assert report.shared_share == 0.5 and report.turns[1].break_offset is None
