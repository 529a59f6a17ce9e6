"""Telling noise from drift in a re-execution. Pure.

A re-executed tool that prints ``3 passed in 0.02s`` where the recording
says ``0.01s`` has not drifted: its output differs only in a volatile field.
Outputs are compared after replacing every volatile field the policy lists
(``[replay] volatile``: durations, timestamps, temp paths, addresses by
default); what still differs is real drift.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from typing import Any, Literal

from policies.model import Volatile

DriftKind = Literal["exit_code", "output", "workspace", "noise"]


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def normalise(text: str, volatile: Sequence[Volatile]) -> str:
    """``text`` with each volatile field replaced, in the policy's order."""
    for field in volatile:
        text = _compiled(field.pattern).sub(field.replacement, text)
    return text


def classify(recorded_exit: int | None, replayed_exit: int | None, recorded: str, replayed: str,
             volatile: Sequence[Volatile]) -> DriftKind | None:
    """None when identical; else what differs, ``noise`` when only volatile fields do."""
    if recorded_exit != replayed_exit:
        return "exit_code"
    if recorded == replayed:
        return None
    return "noise" if normalise(recorded, volatile) == normalise(replayed, volatile) else "output"


def _normalised(value: Any, volatile: Sequence[Volatile]) -> Any:
    """Every string inside a JSON value normalised (as text, not escaped JSON)."""
    if isinstance(value, str):
        return normalise(value, volatile)
    if isinstance(value, list):
        return [_normalised(v, volatile) for v in value]
    if isinstance(value, dict):
        return {k: _normalised(v, volatile) for k, v in value.items()}
    return value


def _request_shape(request_json: str, volatile: Sequence[Volatile]) -> Any:
    request = json.loads(request_json)
    messages = request.get("messages") or []
    if messages and isinstance(messages[-1].get("content"), str):
        # The volatile tail ("tokens left: N") counts the noisy output's tokens.
        messages[-1]["content"] = re.sub(r"\d+", "<n>", messages[-1]["content"])
    return _normalised(request, volatile)


def request_noise(recorded_json: str, replayed_json: str, volatile: Sequence[Volatile]) -> bool:
    """Whether two requests differ only by volatile tool output it carries
    (and the token count in the tail message, which that output moved)."""
    return bool(_request_shape(recorded_json, volatile) == _request_shape(replayed_json, volatile))
