"""Calibrating the safety margin against the prompt tokens the server reports.

After a call whose usage the server reported, compare its prompt_tokens with
our raw estimate. An under-estimate the margin did not cover raises the
margin (never lowers it: a lower margin risks an over-long request) and
yields a warning event; a wild disagreement is flagged as a tokenizer
mismatch. Every call yields an event, so the loop records what happened.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from orchestrator.context.budget import Margin
from orchestrator.contract import Frozen
from orchestrator.errors import ContractError

CalibrationOutcome = Literal["within_margin", "margin_raised", "mismatch"]


class CalibrationEvent(Frozen):
    turn: int
    tokenizer: str
    estimated_raw: int = Field(description="Our count before the margin.")
    estimated: int = Field(description="Our count with the margin, as the budget used it.")
    reported: int = Field(description="prompt_tokens the server reported.")
    ratio: float = Field(description="reported / estimated_raw.")
    margin_before: Margin
    margin_after: Margin
    outcome: CalibrationOutcome
    warning: str | None = None


def calibrate(
    *,
    turn: int,
    tokenizer: str,
    estimated_raw: int,
    reported: int,
    margin: Margin,
    headroom: float = 0.02,
    mismatch_ratio: float = 1.5,
) -> CalibrationEvent:
    """One calibration step. ``headroom`` is added on top of the observed
    under-estimate; a ratio beyond ``mismatch_ratio`` either way is a mismatch."""
    if estimated_raw <= 0 or reported <= 0:
        raise ContractError(
            "calibration needs positive token counts (was usage reported by the server?)",
            estimated_raw=estimated_raw,
            reported=reported,
        )
    ratio = reported / estimated_raw
    estimated = margin.apply(estimated_raw)
    after = margin
    warning = None
    outcome: CalibrationOutcome = "within_margin"
    if reported > estimated:
        needed = (reported - margin.fixed) / estimated_raw - 1.0 + headroom
        after = margin.model_copy(update={"ratio": math.ceil(max(needed, margin.ratio) * 100) / 100})
        outcome = "margin_raised"
        warning = (
            f"server counted {reported} prompt tokens, {tokenizer} estimated {estimated} with margin; "
            f"margin ratio raised {margin.ratio:.2f} -> {after.ratio:.2f}"
        )
    if ratio > mismatch_ratio or ratio < 1.0 / mismatch_ratio:
        outcome = "mismatch"
        warning = (
            f"server counted {reported} prompt tokens against {estimated_raw} by {tokenizer} "
            f"(ratio {ratio:.2f}): the tokenizer does not fit this model"
            + (f"; margin ratio raised to {after.ratio:.2f}" if after != margin else "; margin kept")
        )
    return CalibrationEvent(
        turn=turn,
        tokenizer=tokenizer,
        estimated_raw=estimated_raw,
        estimated=estimated,
        reported=reported,
        ratio=round(ratio, 4),
        margin_before=margin,
        margin_after=after,
        outcome=outcome,
        warning=warning,
    )
