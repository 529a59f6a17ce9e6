"""The context budget: S <= S_max - K_max, with a safety margin on our counts.

S_max is the server's window, K_max the output ceiling reserved for the
answer. Our token counts are estimates (another tokenizer, a guessed chat
template), so every count that is checked against the budget first goes
through a ``Margin``.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from orchestrator.contract import Frozen
from orchestrator.errors import ConfigError

WindowSource = Literal["config", "server", "config+server"]


class Budget(Frozen):
    s_max: int = Field(gt=0, description="Context window of the server, in tokens.")
    k_max: int = Field(gt=0, description="Output ceiling (max_tokens) reserved for the answer.")
    source: WindowSource = "config"

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> "Budget":
        if self.k_max >= self.s_max:
            raise ValueError(f"k_max {self.k_max} leaves no room for a prompt in s_max {self.s_max}")
        return self

    @property
    def available(self) -> int:
        """The most prompt tokens S a request may carry."""
        return self.s_max - self.k_max


class Margin(Frozen):
    """Estimated tokens = raw + ceil(raw * ratio) + fixed."""

    ratio: float = Field(default=0.10, ge=0.0)
    fixed: int = Field(default=16, ge=0)

    def apply(self, raw: int) -> int:
        return raw + math.ceil(raw * self.ratio) + self.fixed


def resolve_budget(*, configured: int | None, discovered: int | None, k_max: int) -> Budget:
    """S_max from config and/or the server. Config may only shrink what the
    server reports; with neither, the window is unknown and that is an error."""
    s_max: int
    source: WindowSource
    if configured is not None and discovered is not None:
        s_max, source = min(configured, discovered), "config+server"
    elif configured is not None:
        s_max, source = configured, "config"
    elif discovered is not None:
        s_max, source = discovered, "server"
    else:
        raise ConfigError(
            "context window unknown: the server does not report it (llama.cpp's OpenAI server does not); "
            "give --context-window N (the model's context in tokens; context_window in the config file)",
        )
    try:
        return Budget(s_max=s_max, k_max=k_max, source=source)
    except ValueError as exc:
        raise ConfigError(f"invalid context budget: {exc}", s_max=s_max, k_max=k_max) from exc
