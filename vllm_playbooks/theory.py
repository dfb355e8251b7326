"""Closed-form speculative-decoding relations (Leviathan, Kalman & Matias 2023, arXiv 2211.17192)."""

from __future__ import annotations

import math


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """τ(α, k) = (1 − α^(k+1)) / (1 − α): tokens one verify step emits per sequence, bonus token included.

    With i.i.d. per-token acceptance α this equals vLLM's mean acceptance length. τ(0, k) = 1 and
    τ(1, k) = k + 1 (the limit of the formula).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if math.isclose(alpha, 1.0):
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def tokens_per_step_from_rates(rates: list[float]) -> float:
    """Mean acceptance length for unconditional per-position rates p_i: 1 + Σ p_i (any chain, not only i.i.d.)."""
    return 1.0 + float(sum(rates))
