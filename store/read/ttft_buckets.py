"""TTFT histograms' arithmetic: the bucket a time falls in, the time a
bucket stands for, and the check that folds a histogram into one number
(schema 11). Pure: used by the per-run totals, the per-day rollup and the
aggregate reports alike."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

TTFT_CHECK_MODULUS = 2_147_483_647
"""A prime below 2**31, so a check fits every SQL integer column."""
TTFT_BITS = 5
"""Significant bits a TTFT keeps, in milliseconds: exact below 32 ms, then 16
buckets an octave, reported at their midpoint (within 1/32 of the value)."""


def ttft_bucket(ms: int) -> int:
    """The lower bound of the bucket ``ms`` falls in (see ``TTFT_BITS``)."""
    if ms < 1 << TTFT_BITS:
        return ms
    shift = ms.bit_length() - TTFT_BITS
    return (ms >> shift) << shift


@functools.cache
def bucket_weight(bucket_ms: int) -> int:
    """A bucket's weight in ``ttft_check``: a hash, so that calls moved from
    one bucket to another change the check as surely as calls added."""
    raw = hashlib.sha256(b"escrow ttft bucket %d" % bucket_ms).digest()
    return int.from_bytes(raw[:8], "little") % TTFT_CHECK_MODULUS


def ttft_check(counts: Iterable[tuple[int, int]]) -> int:
    """(bucket, calls) pairs folded into one number: the sum of each bucket's
    weight times its calls, modulo a prime. It adds up: the check of a sum of
    histograms (a day's rollup, a group's) is the sum of their checks, so a
    report compares the rollup rows it summed with the totals of their runs."""
    return sum(bucket_weight(bucket) * calls for bucket, calls in counts) % TTFT_CHECK_MODULUS


def bucket_seconds(lower: int) -> float:
    """The TTFT a bucket stands for: its midpoint, in seconds."""
    width = 1 << max(0, lower.bit_length() - TTFT_BITS) if lower >= 1 << TTFT_BITS else 1
    return (lower + (width - 1) / 2) / 1000.0
