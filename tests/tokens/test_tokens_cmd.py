"""``escrow tokens RUN`` over runs recorded from the fault server, with the
ids in vLLM's and llama.cpp's own fields, and the hostile cases: each a
clear class or problem, and nothing the engine sent is lost."""

from __future__ import annotations

import pytest

from orchestrator.adapters.fault_server import Reply
from tests.tokens.conftest import EOT, NL, growing, record, tokens_cli


@pytest.mark.parametrize("stream", [True, False])
def test_a_growing_vllm_run_is_clean_call_by_call(srv, tmp_path, stream):
    srv.script(growing(4))
    db = tmp_path / "escrow.db"
    if stream:
        run_id, envelopes = record(db, srv.base_url, 4)
    else:
        from tests.tokens import conftest

        original = conftest.request
        conftest.request = lambda turn, **kw: original(turn, **kw).model_copy(update={"stream": False})
        try:
            run_id, envelopes = record(db, srv.base_url, 4)
        finally:
            conftest.request = original
    assert envelopes[1].prompt_token_ids[:2] == (2, 5) and envelopes[0].completion_token_ids == (1000, 1001, EOT)
    result, data = tokens_cli(db, run_id, "--json")
    assert result.exit_code == 0, result.output
    assert [c["token_class"] for c in data["calls"]] == ["CLEAN"] * 4
    assert data["summary"] == "4 of 4 calls CLEAN" and data["counts"]["FORK"] == 0
    text, _ = tokens_cli(db, run_id)
    assert text.exit_code == 0 and "4 of 4 calls CLEAN" in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 80


def test_a_prompt_that_does_not_extend_the_last_forks_with_its_position(srv, tmp_path):
    replies = growing(3)
    # Turn 2's prompt rewrites history at position 3 (compaction).
    rewritten = [2, 5, 1000, 999, 7, NL]
    replies[2] = replies[2].model_copy(update={"prompt_token_ids": rewritten})
    srv.script(replies)
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, srv.base_url, 3)
    result, data = tokens_cli(db, run_id, "--json")
    assert result.exit_code == 0, result.output
    fork = data["calls"][2]
    assert fork["token_class"] == "FORK" and fork["drift"]["position"] == 3
    assert fork["drift"]["expected"][:2] == [1001, EOT] and fork["drift"]["got"][:2] == [999, 7]
    assert data["summary"] == "2 of 3 calls CLEAN (1 FORK)"
    text, _ = tokens_cli(db, run_id)
    assert "#3 FORK at prompt position 3:" in text.stdout and "expected: [1001, 106" in text.stdout


def test_a_template_that_strips_past_reasoning_forks_inside_the_earlier_prompt(srv, tmp_path):
    reasoning = [300, 301, 302]
    first = Reply(text="ok", reasoning="think", prompt_token_ids=[2, 5, *reasoning, EOT, NL, 105, 9],
                  completion_token_ids=[40, EOT])
    second = Reply(text="ok", prompt_token_ids=[2, 5, EOT, NL, 105, 9, 40, EOT, NL], completion_token_ids=[41, EOT])
    srv.script([first, second])
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, srv.base_url, 2)
    _, data = tokens_cli(db, run_id, "--json")
    fork = data["calls"][1]
    assert (fork["token_class"], fork["drift"]["position"], fork["drift"]["within"]) == ("FORK", 2, "prompt")


def test_ids_that_disagree_with_usage_are_problems_and_exit_1(srv, tmp_path):
    replies = growing(2)
    replies[1] = replies[1].model_copy(update={"usage": {"prompt_tokens": 99, "completion_tokens": 2,
                                                         "total_tokens": 101}})
    srv.script(replies)
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, srv.base_url, 2)
    result, data = tokens_cli(db, run_id, "--json")
    assert result.exit_code == 1
    assert data["calls"][1]["problems"] == [
        f"{len(replies[1].prompt_token_ids)} prompt ids, usage.prompt_tokens 99",
        "3 sampled ids, usage.completion_tokens 2",
    ]
    assert data["calls"][1]["token_class"] == "CLEAN"  # the class is about ids, the problem about figures


def test_a_length_that_differs_from_the_logprobs_is_a_problem(srv, tmp_path):
    # Four ids for three streamed tokens (three logprob entries).
    reply = growing(1)[0]
    reply = reply.model_copy(update={"completion_token_ids": [1000, 1001, 1002, EOT],
                                     "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}})
    srv.script([reply])
    db = tmp_path / "escrow.db"
    run_id, envelopes = record(db, srv.base_url, 1)
    assert envelopes[0].completion_token_ids == (1000, 1001, 1002, EOT)  # the leftover id came on the last chunk
    result, data = tokens_cli(db, run_id, "--json")
    assert result.exit_code == 1 and data["calls"][0]["problems"] == ["3 logprobs for 4 sampled ids"]


def test_negative_ids_are_recorded_as_sent_and_flagged(srv, tmp_path):
    reply = growing(1)[0].model_copy(update={"prompt_token_ids": [2, -7]})
    srv.script([reply])
    db = tmp_path / "escrow.db"
    run_id, envelopes = record(db, srv.base_url, 1)
    assert envelopes[0].prompt_token_ids == (2, -7)
    result, data = tokens_cli(db, run_id, "--json")
    assert result.exit_code == 1 and data["calls"][0]["problems"] == ["prompt id -7 at position 1 is negative"]


@pytest.mark.parametrize("bad", [["2", "5"], [2, 5.5], [2, True], "2 5", {"ids": [2]}])
def test_ids_that_are_not_integers_are_absent_never_coerced_and_the_answer_is_kept(srv, tmp_path, bad):
    reply = growing(1)[0].model_copy(update={"prompt_token_ids": bad, "usage": "auto"})
    srv.script([reply])
    db = tmp_path / "escrow.db"
    run_id, envelopes = record(db, srv.base_url, 1)
    envelope = envelopes[0]
    assert envelope.status.value == "COMPLETED" and envelope.payload.text == reply.text
    assert envelope.prompt_token_ids is None and envelope.completion_token_ids == (1000, 1001, EOT)
    assert '"prompt_token_ids":' in (envelope.raw_response or "")  # what the engine sent is kept
    _, data = tokens_cli(db, run_id, "--json")
    assert data["calls"][0]["token_class"] == "ABSENT"


def test_an_unreadable_sampled_piece_makes_the_sampled_ids_absent_not_shorter(srv, tmp_path):
    reply = growing(1)[0].model_copy(update={"completion_token_ids": [1000, "x", EOT]})
    srv.script([reply])
    db = tmp_path / "escrow.db"
    run_id, envelopes = record(db, srv.base_url, 1)
    assert envelopes[0].completion_token_ids is None and envelopes[0].payload.text == reply.text
    _, data = tokens_cli(db, run_id, "--json")
    assert data["calls"][0]["token_class"] == "ABSENT"


def test_a_missing_field_is_absent(srv, tmp_path):
    replies = growing(3)
    replies[1] = replies[1].model_copy(update={"prompt_token_ids": None})
    srv.script(replies)
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, srv.base_url, 3)
    _, data = tokens_cli(db, run_id, "--json")
    assert [c["token_class"] for c in data["calls"]] == ["CLEAN", "ABSENT", "CLEAN"]
    # Turn 2 compares with turn 0, the last call with ids (turn 1's answer, between, is
    # what the rollout export refuses the run for).
    assert data["calls"][2]["against"] == data["calls"][0]["call_id"]


def test_llama_cpp_ids_on_logprob_entries_have_no_prompt_ids(srv, tmp_path):
    replies = [r.model_copy(update={"token_ids_as": "llama.cpp"}) for r in growing(2)]
    srv.script(replies)
    db = tmp_path / "escrow.db"
    run_id, envelopes = record(db, srv.base_url, 2)
    assert envelopes[0].completion_token_ids == (1000, 1001, EOT) and envelopes[0].prompt_token_ids is None
    assert [e.get("id") for e in envelopes[0].logprobs] == [1000, 1001, EOT]
    result, data = tokens_cli(db, run_id, "--json")
    assert [c["token_class"] for c in data["calls"]] == ["ABSENT", "ABSENT"]
    assert "no prompt ids" in tokens_cli(db, run_id)[0].stdout


def test_an_unknown_run_is_a_clear_error(tmp_path):
    from store.store import Store

    db = tmp_path / "escrow.db"
    Store.open(f"sqlite:///{db}").close()
    result, _ = tokens_cli(db, "nope")
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_show_report_and_the_viewer_say_how_many_calls_are_clean(srv, tmp_path):
    import json

    from typer.testing import CliRunner

    from cli.main import app
    from tests.view.conftest import serving
    from tests.view.test_transcript import get

    replies = growing(3)
    replies[2] = replies[2].model_copy(update={"prompt_token_ids": [2, 5, 1000, 999]})
    srv.script(replies)
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, srv.base_url, 3)
    shown = CliRunner().invoke(app, ["show", run_id, "--db", f"sqlite:///{db}"])
    assert "  tokens:  2 of 3 calls CLEAN (1 FORK) (escrow tokens)" in shown.stdout
    report = CliRunner().invoke(app, ["report", run_id, "--db", f"sqlite:///{db}"])
    assert "tokens 2 of 3 calls CLEAN (1 FORK) (escrow tokens)" in report.stdout
    data = json.loads(CliRunner().invoke(app, ["report", run_id, "--db", f"sqlite:///{db}", "--json"]).stdout)
    assert (data["tokens"]["clean"], data["tokens"]["calls"], data["tokens"]["fork"]) == (2, 3, 1)
    with serving(db) as base:
        status, html = get(f"{base}/run/{run_id}")
    assert status == 200 and '<b>token ids</b> 2 of 3 calls CLEAN (1 FORK)' in html


def test_with_a_tokenizer_at_hand_drifts_are_decoded_and_ids_checked_against_the_vocabulary(tmp_path):
    """``--model-url`` of a server posing as llama-server: ``/detokenize``
    gives the text on both sides, ``/v1/models`` the vocabulary size."""
    from orchestrator.adapters.fault_server import FaultServer

    posing = {"/detokenize": {"content": "<decoded>"},
              "/v1/models": {"object": "list", "data": [{"id": "m", "meta": {"n_vocab": 1005}}]}}
    with FaultServer(endpoints=posing) as server:
        replies = growing(2)
        replies[1] = replies[1].model_copy(update={"prompt_token_ids": [2, 5, 1000, 77, EOT, NL]})
        server.script(replies)
        db = tmp_path / "escrow.db"
        run_id, _ = record(db, server.base_url, 2)
        result, data = tokens_cli(db, run_id, "--json", "--model-url", server.base_url)
        text, _ = tokens_cli(db, run_id, "--model-url", server.base_url)
    assert data["vocab_size"] == 1005
    drift = data["calls"][1]["drift"]
    assert (drift["expected_text"], drift["got_text"]) == ("<decoded>", "<decoded>")
    # Turn 1's sampled ids 1010, 1011 are past the vocabulary of 1005: a problem, exit 1.
    assert data["calls"][1]["problems"] == ["sampled id 1010 at position 0 is out of the vocabulary (1005)"]
    assert result.exit_code == 1 and "'<decoded>'" in text.stdout


def test_an_unreachable_tokenizer_is_a_clear_error(srv, tmp_path):
    srv.script(growing(1))
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, srv.base_url, 1)
    from tests.llama_server import free_port

    result, _ = tokens_cli(db, run_id, "--model-url", f"http://127.0.0.1:{free_port()}/v1")
    from orchestrator.errors import TokenizerError

    assert isinstance(result.exception, TokenizerError) and "/detokenize unreachable" in result.exception.message


def test_hostile_decoded_text_is_escaped_and_folded_to_80_columns(tmp_path):
    from orchestrator.adapters.fault_server import FaultServer

    hostile = "\x1b[31mred\x1b[0m\r\n" + "x" * 300 + " /a/very/long/path" * 10
    posing = {"/detokenize": {"content": hostile}}
    with FaultServer(endpoints=posing) as server:
        replies = growing(2)
        replies[1] = replies[1].model_copy(update={"prompt_token_ids": [2, 5, 999]})
        server.script(replies)
        db = tmp_path / "escrow.db"
        run_id, _ = record(db, server.base_url, 2)
        result, _ = tokens_cli(db, run_id, "--model-url", server.base_url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "\x1b" not in result.stdout and "\r" not in result.stdout
    assert "#2 FORK at prompt position 2:" in result.stdout
