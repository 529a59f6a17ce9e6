import pytest

from orchestrator.context import MessageCounter, TemplateOverhead, TiktokenCounter, resolve_counter
from orchestrator.contract import Message, ToolCall
from orchestrator.errors import TokenizerError


def test_offline_cl100k_counts(counter):
    assert counter.name == "tiktoken:cl100k_base"
    assert counter.count("hello world") == 2
    assert counter.count("") == 0


def test_special_token_text_is_counted_not_rejected(counter):
    assert counter.count("<|endoftext|>") > 1


def test_unknown_tokenizer_is_a_clear_error():
    with pytest.raises(TokenizerError, match="unknown tokenizer 'llama-bpe'"):
        resolve_counter("llama-bpe")
    with pytest.raises(TokenizerError, match="not available offline"):
        TiktokenCounter("o200k_does_not_exist")
    assert resolve_counter("tiktoken:cl100k_base").count("hello world") == 2


def test_message_counts_are_cached_by_content(counter):
    counts = MessageCounter(counter, TemplateOverhead(per_message=8, per_tool_call=12))
    message = Message(
        role="assistant", content="ok", tool_calls=(ToolCall(id="c1", name="bash", arguments='{"cmd":"ls"}'),)
    )
    first = counts.message(message)
    assert first == 8 + counter.count("ok") + 12 + counter.count("c1") + counter.count("bash") + counter.count(
        '{"cmd":"ls"}'
    )
    assert counts.message(Message(role="assistant", content="ok", tool_calls=message.tool_calls)) == first
    assert (counts.hits, counts.misses) == (1, 1)
    counts.message(Message(role="user", content="ok"))
    assert counts.misses == 2


def test_recorded_counts_replay_the_same_decisions(counter, make_context):
    from orchestrator.context import RecordingCounter, ReplayCounter

    def trajectory(tok):
        ctx = make_context(s_max=900, k_max=100, tokenizer=tok)
        out = []
        for t in range(1, 8):
            ctx.append([Message(role="assistant", content=f"step {t} " * 30)], turn=t)
            r = ctx.render(turn=t, turns_left=8 - t)
            out.append((r.messages, r.prompt_tokens_estimate, r.compactions))
        return out

    recording = RecordingCounter(counter)
    live = trajectory(recording)
    assert any(c for _, _, c in live)  # the trajectory does compact
    assert trajectory(ReplayCounter(recording.name, recording.counts)) == live
    with pytest.raises(TokenizerError, match="never counted"):
        ReplayCounter("x", {}).count("new text")


def test_the_count_cache_tells_apart_messages_differing_in_any_counted_text(counter):
    # The cache key is the texts the count reads; a message differing in any
    # one of them must be counted afresh, never served another's count.
    counts = MessageCounter(counter)
    call = ToolCall(id="c1", name="bash", arguments='{"cmd":"ls"}')
    longer_arguments = '{"cmd":"ls -la; echo one two three four five six"}'
    base = Message(role="assistant", content="ok", tool_calls=(call,))
    variants = [
        base,
        base.model_copy(update={"content": "ok ok ok"}),
        base.model_copy(update={"tool_calls": (call.model_copy(update={"id": "call_with_a_longer_id"}),)}),
        base.model_copy(update={"tool_calls": (call.model_copy(update={"name": "read_file_and_more"}),)}),
        base.model_copy(update={"tool_calls": (call.model_copy(update={"arguments": longer_arguments}),)}),
        base.model_copy(update={"tool_calls": (call, call)}),
        base.model_copy(update={"tool_calls": ()}),
        Message(role="tool", content="ok", tool_call_id="c1"),
        Message(role="tool", content="ok", tool_call_id="c1", name="bash_tool_name"),
    ]
    seen = [counts.message(m) for m in variants]
    assert seen == [MessageCounter(counter).message(m) for m in variants]  # each as counted by a fresh cache
    assert len(set(seen)) == len(seen)  # so each variant really changes the count
    assert counts.hits == 0
