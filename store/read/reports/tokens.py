"""``escrow export --tokens``: token-faithful examples for on-policy
distillation and RL trainers, one line per answered call, built from what
the engine returned (token ids, tokens, logprobs), never by re-tokenising
the text. A call whose engine gave no ids is still written, flagged
``token_faithful: false``, so a trainer can drop it rather than guess."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from orchestrator.logprobs import read_logprobs
from orchestrator.trajectory import Trajectory
from store.read.reports.export import run_reward


def token_lines(trajectory: Trajectory) -> Iterator[dict[str, Any]]:
    reward = run_reward(trajectory)  # the run's verdict on every line: a SUSPECT run is never a pass
    for record in trajectory.turns:
        for call in record.calls:
            if call.response is None:
                continue
            envelope = call.response.envelope()
            tokens = read_logprobs(envelope.logprobs)
            completion_ids = list(envelope.completion_token_ids) if envelope.completion_token_ids is not None else None
            yield {
                "run_id": trajectory.run.id,
                "call_id": call.id,
                "turn": call.turn,
                "status": envelope.status.value,
                "model": envelope.model or call.request_model,
                "engine": envelope.engine,
                "prompt_messages": [m.to_wire() for m in call.request().messages],
                "prompt_token_ids": list(envelope.prompt_token_ids) if envelope.prompt_token_ids is not None else None,
                "completion_text": envelope.payload.text,
                "completion_token_ids": completion_ids,
                "completion_tokens": [t.token for t in tokens] or None,
                "completion_logprobs": [t.logprob for t in tokens] or None,
                "top_logprobs": [
                    [{"token": a.token, "id": a.token_id, "logprob": a.logprob} for a in t.top] for t in tokens
                ]
                or None,
                "top_k": envelope.top_logprobs,
                "logprobs_mode": envelope.logprobs_mode,
                "token_faithful": completion_ids is not None,
                "verdict": trajectory.run.verdict,
                **reward,
            }
