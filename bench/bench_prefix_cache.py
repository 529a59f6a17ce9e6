"""Prefix caching against the real llama.cpp server: stable layout vs a timestamp.

The same synthetic trajectory is sent twice, each run's turns back to back
(llama-cpp-python keeps only the previous request's prefix, in one slot):

  stable       the context as ContextAssembler renders it: each request extends the last
  timestamped  identical, except the system prompt starts with the current time

Each request asks for one output token, so its wall time is essentially
prompt processing. Prints per-turn figures side by side, the totals, their
ratio, the cached-token share where the server reports one, the byte-prefix
share from the prefix report, and the prefix-cache accounting for this run.

Usage: .venv/bin/python bench/bench_prefix_cache.py [--url http://127.0.0.1:8088] [--turns 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
import uuid

import httpx

from orchestrator.adapters.model_client.server_tokenizer import counter_for
from orchestrator.context import (
    Budget,
    ContextAssembler,
    PromptBytes,
    RenderedContext,
    prefill_tokens_ideal_cache,
    prefix_report,
    resent_tokens_no_cache,
)
from orchestrator.contract import Message

PREAMBLE = ("You are a coding agent in a sandboxed copy of a Python repository. Each turn, propose one "
            "shell command, read its output, and continue until the test suite passes. ") * 4


def turn_messages(t: int) -> list[Message]:
    return [
        Message(role="assistant", content=f"Step {t}: run `pytest -x tests/test_mod{t}.py` to see the failure."),
        Message(role="user", content=f"tests/test_mod{t}.py::test_parse FAILED: expected {t * 17} got {t * 17 + 1}; "
                                     f"src/mod{t}.py line {t * 3} returns the raw value"),
    ]


def run(http: httpx.Client, args, counter, nonce: str, timestamped: bool) -> dict:
    ctx = ContextAssembler(system=f"Session {nonce}.\n{PREAMBLE}", task="Make the test suite pass.", tools=(),
                  budget=Budget(s_max=args.n_ctx, k_max=8), counter=counter, system_role="user")
    out: dict[str, list] = {"seconds": [], "prompt_tokens": [], "cached_tokens": [], "prompts": []}
    for turn in range(args.turns):
        if turn:
            ctx.append(turn_messages(turn), turn=turn, elidable=[False, True])
        rendered: RenderedContext = ctx.render(turn=turn, turns_left=args.turns - turn)
        messages = rendered.messages
        if timestamped:
            stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
            first = messages[0].model_copy(update={"content": f"Current time: {stamp}\n{messages[0].content}"})
            messages = (first, *messages[1:])
        request = rendered.model_copy(update={"messages": messages}).build_request(
            model=args.model, stream=False, max_tokens=1)
        started = time.perf_counter()
        response = http.post(f"{args.url}/v1/chat/completions", json=request.wire_body())
        out["seconds"].append(time.perf_counter() - started)
        response.raise_for_status()
        usage = response.json().get("usage") or {}
        out["prompt_tokens"].append(usage.get("prompt_tokens"))
        out["cached_tokens"].append((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
        out["prompts"].append(PromptBytes.from_request(request, tail_messages=1))
    return out


def share(values: list, totals: list) -> str:
    if any(v is None for v in values):
        return "not reported by the server"
    return f"{sum(values) / sum(totals):.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8088", help="server root (no /v1)")
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--n-ctx", type=int, default=8192, help="the server's window (llama.cpp does not report it)")
    args = parser.parse_args()
    with httpx.Client(timeout=600.0) as http:
        counter = counter_for("auto", base_url=args.url, model=args.model, http=http)
        nonce = uuid.uuid4().hex[:12]
        runs = {"stable": run(http, args, counter, nonce, False), "timestamped": run(http, args, counter, nonce, True)}
    s, ts = runs["stable"], runs["timestamped"]
    print(
        f"{args.turns}-turn trajectory, {args.model} at {args.url}, 1 output token per call, tokenizer {counter.name}"
    )
    print(
        f"{'turn':>4} {'prompt tok':>10} {'stable s':>9} {'stamped s':>10} {'stable shared B':>16} "
        f"{'stamped shared B':>17}"
    )
    reports = {name: prefix_report(r["prompts"]).turns for name, r in runs.items()}
    for t in range(args.turns):
        print(f"{t:>4} {s['prompt_tokens'][t]:>10} {s['seconds'][t]:>9.2f} {ts['seconds'][t]:>10.2f} "
              f"{reports['stable'][t].shared_bytes:>16,} {reports['timestamped'][t].shared_bytes:>17,}")
    total_s, total_ts = sum(s["seconds"]), sum(ts["seconds"])
    print(f"total prompt processing: stable {total_s:.1f} s, timestamped {total_ts:.1f} s, "
          f"ratio timestamped/stable {total_ts / total_s:.1f}x")
    print(f"later turns (1..{args.turns - 1}) mean: stable {sum(s['seconds'][1:]) / (args.turns - 1):.2f} s, "
          f"timestamped {sum(ts['seconds'][1:]) / (args.turns - 1):.2f} s")
    print(
        f"server-reported prompt tokens: stable {sum(s['prompt_tokens']):,}, timestamped {sum(ts['prompt_tokens']):,}"
    )
    print(f"server-reported cached share: stable {share(s['cached_tokens'], s['prompt_tokens'])}, "
          f"timestamped {share(ts['cached_tokens'], ts['prompt_tokens'])}")
    print(f"byte prefix shared with the previous request: stable {prefix_report(s['prompts']).shared_share:.1%}, "
          f"timestamped {prefix_report(ts['prompts']).shared_share:.1%}")
    s0 = s["prompt_tokens"][0]
    delta = round((s["prompt_tokens"][-1] - s0) / (args.turns - 1))
    print(
        f"accounting for S0={s0}, delta={delta}, N={args.turns}: no cache "
        f"{resent_tokens_no_cache(s0, delta, args.turns):,} "
        f"prompt tokens, ideal prefix cache {prefill_tokens_ideal_cache(s0, delta, args.turns):,}"
    )


if __name__ == "__main__":
    main()
