"""Speculative decoding in closed form: tokens per verify step, speed-up, break-even acceptance, and the inverse
fits."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


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


def speedup(alpha: float, k: int, c: float) -> float:
    """S = (1 − α^(k+1)) / ((1 − α)(k·c + 1)) = τ(α, k) / (k·c + 1).

    ``c`` is the cost of one draft forward over one target forward. The model assumes the target's verify step costs
    the same as one decode step whatever k is (true only well below the roofline's ridge; see ``step_time_s``).
    """
    if c < 0:
        raise ValueError(f"c must be >= 0, got {c}")
    return expected_tokens_per_step(alpha, k) / (k * c + 1.0)


def break_even_alpha(k: int, c: float, tol: float = 1e-12) -> float | None:
    """Smallest α in [0, 1] with S(α, k, c) ≥ 1, by bisection (S grows with α); None when even α = 1 falls short.

    k = 0 is never a speedup over itself (S = 1 for every α), and returns 0.0.
    """
    if k == 0:
        return 0.0
    if speedup(1.0, k, c) < 1.0:
        return None
    if speedup(0.0, k, c) >= 1.0:
        return 0.0
    low, high = 0.0, 1.0
    while high - low > tol:
        mid = (low + high) / 2
        if speedup(mid, k, c) >= 1.0:
            high = mid
        else:
            low = mid
    return high


def acceptance_rate_of_alpha(alpha: float, k: int) -> float:
    """vLLM's draft acceptance rate (accepted / drafted tokens) for an i.i.d. per-token α: (τ(α, k) − 1) / k.

    It is the mean of the unconditional per-position rates α, α², …, α^k, so it is lower than α for k > 1.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 for an acceptance rate, got {k}")
    return (expected_tokens_per_step(alpha, k) - 1.0) / k


def draft_cost_from_tpot(tpot_spec: float, tpot_off: float, tau: float, k: int) -> float:
    """The draft cost ratio c that a measured pair implies: c = (TPOT_spec · τ / TPOT_off − 1) / k.

    It inverts ``speculative_tpot_s`` with the target's verify step costing one plain decode step (``TPOT_off``), which
    holds at low batch, well below the roofline's ridge. Everything speculation adds beyond the verify, the k draft
    passes and their fixed per-forward costs, ends up in c. With that c the break-even acceptance rate
    (``acceptance_rate_of_alpha`` at ``break_even_alpha(k, c)``) equals c itself, since S = 1 needs τ = 1 + k·c.
    """
    if min(tpot_spec, tpot_off) <= 0 or tau < 1 or k < 1:
        raise ValueError("TPOTs must be > 0, tau >= 1 and k >= 1")
    return (tpot_spec * tau / tpot_off - 1.0) / k


def alpha_from_acceptance_length(length: float, k: int, tol: float = 1e-12) -> float:
    """The i.i.d. α whose τ(α, k) equals a measured mean acceptance length ``length`` (in [1, k + 1]), by bisection."""
    if k < 1:
        raise ValueError(f"k must be >= 1 to invert tau, got {k}")
    if not 1.0 <= length <= k + 1:
        raise ValueError(f"acceptance length must lie in [1, {k + 1}] for k={k}, got {length}")
    low, high = 0.0, 1.0
    while high - low > tol:
        mid = (low + high) / 2
        if expected_tokens_per_step(mid, k) < length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def speculative_tpot_s(
    target_verify_s: float,
    draft_step_s: float,
    alpha: float,
    k: int,
    draft_overhead_s: float = 0.0,
    verify_overhead_s: float = 0.0,
) -> float:
    """Time per output token with speculation: (T_target(B, k+1) + k · (T_draft(B, 1) + t_d) + t_v) / τ(α, k).

    ``draft_overhead_s`` (t_d) is a fixed cost per draft forward and ``verify_overhead_s`` (t_v) one per speculative
    step, beyond the roofline times of the forwards (see ``DraftOverheadFit``); both default to 0, Leviathan's model.
    """
    if min(draft_overhead_s, verify_overhead_s) < 0:
        raise ValueError("draft_overhead_s and verify_overhead_s must be >= 0")
    step = target_verify_s + k * (draft_step_s + draft_overhead_s) + verify_overhead_s
    return step / expected_tokens_per_step(alpha, k)


def fit_iid_alpha(rates: Iterable[float], resolution: float = 1e-5) -> float:
    """The i.i.d. α whose α, α², …, α^k is closest (least squares) to published unconditional per-position rates."""
    p = np.asarray(list(rates), dtype=float)
    if p.size == 0 or np.any((p < 0) | (p > 1)):
        raise ValueError(f"rates must be a non-empty list in [0, 1], got {p.tolist()}")
    grid = np.arange(0.0, 1.0 + resolution / 2, resolution)
    errors = ((grid[:, None] ** np.arange(1, p.size + 1) - p) ** 2).sum(axis=1)
    return float(grid[int(errors.argmin())])


def rates_first_then_constant(first: float, later: float, k: int) -> list[float]:
    """Unconditional per-position rates when draft 1 is accepted with probability ``first`` and every later draft,
    given the ones before it were accepted, with ``later``: [first, first·later, first·later², …] (k entries)."""
    if not (0.0 <= first <= 1.0 and 0.0 <= later <= 1.0) or k < 1:
        raise ValueError(f"need first and later in [0, 1] and k >= 1, got {first}, {later}, {k}")
    return [first * later**i for i in range(k)]


def fit_later_conditional(first: float, k: int, acceptance_length: float, tol: float = 1e-12) -> float:
    """The constant conditional rate of drafts 2..k that, with ``first`` at draft 1, gives a published mean
    acceptance length at ``k`` drafts: 1 + Σ rates_first_then_constant(first, later, k) = acceptance_length."""
    low_tau = tokens_per_step_from_rates(rates_first_then_constant(first, 0.0, k))
    high_tau = tokens_per_step_from_rates(rates_first_then_constant(first, 1.0, k))
    if not low_tau <= acceptance_length <= high_tau:
        raise ValueError(
            f"an acceptance length of {acceptance_length} at k={k} is out of reach with first={first}: "
            f"it lies in [{low_tau:.3f}, {high_tau:.3f}]"
        )
    low, high = 0.0, 1.0
    while high - low > tol:
        mid = (low + high) / 2
        if tokens_per_step_from_rates(rates_first_then_constant(first, mid, k)) < acceptance_length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def implied_draft_cost_ratio(acceptance_length: float, k: int, speedup_factor: float) -> float:
    """The draft cost ratio c that Leviathan's S = τ / (k·c + 1) implies for a reported τ and speed-up: (τ/S − 1)/k."""
    if k < 1 or speedup_factor <= 0:
        raise ValueError(f"need k >= 1 and a positive speed-up, got k={k}, S={speedup_factor}")
    return (acceptance_length / speedup_factor - 1.0) / k
