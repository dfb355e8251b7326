"""One load level for ``vllm bench serve``: closed-loop concurrency, open-loop request rate, or both."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The duration rule (book: methodology): a measured run lasts at least this long ...
MIN_DURATION_S = 30.0
#: ... and holds at least this many requests per unit of concurrency, whichever gives more requests.
MIN_REQUESTS_PER_CONCURRENCY = 10
#: The length spread a closed-loop point gets unless its case names one: each request's input and output lengths
#: drawn within ±50 % (``--random-range-ratio 0.5``), so that requests do not prefill and finish in lock-step waves
#: (the book's load-desync case measures what fixed lengths move). Open-loop points keep fixed lengths: their
#: arrivals are already spread in time.
CLOSED_LOOP_RANGE_RATIO = 0.5
#: The most concurrent clients, and the highest request rate, a load point may ask for: the bench builds its prompts
#: in memory (``measured_prompts``: 10 per client at least), so a mistyped 10**9 would fill the memory, not a GPU.
MAX_CONCURRENCY, MAX_RATE_QPS = 65_536, 100_000.0


class LoadPoint(BaseModel):
    """Random prompts sent at a concurrency cap and/or a Poisson (gamma) request rate.

    Lengths are fixed (``random_range_ratio`` 0) or drawn uniformly from ``[(1 - r)·L, (1 + r)·L]`` for each request
    (vLLM's ``--random-range-ratio r``, for input and output alike).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # strict: a YAML ``true`` is not a number here, and NaN or infinity is never a load
    input_len: int = Field(ge=1, strict=True, description="prompt tokens")
    output_len: int = Field(ge=1, strict=True, description="output tokens (ignore_eos)")
    concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY, strict=True, description="--max-concurrency")
    request_rate_qps: float | None = Field(
        None, gt=0, le=MAX_RATE_QPS, strict=True, allow_inf_nan=False, description="--request-rate"
    )
    burstiness: float = Field(1.0, gt=0, strict=True, allow_inf_nan=False, description="--burstiness; 1 is Poisson")
    seed: int = Field(0, ge=0, strict=True, description="dataset seed")
    temperature: float | None = Field(
        None,
        ge=0,
        strict=True,
        allow_inf_nan=False,
        description="--temperature sent with each request; None: the server's default (1.0)",
    )
    random_range_ratio: float = Field(
        0.0,
        ge=0,
        lt=1,
        strict=True,
        description="--random-range-ratio: 0 fixed lengths; r draws each in [(1-r)·L, (1+r)·L]; when not given, "
        "CLOSED_LOOP_RANGE_RATIO for a closed loop (concurrency alone), 0 with a request rate",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_spread(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("random_range_ratio") is None:
            closed = data.get("request_rate_qps") is None
            data = {**data, "random_range_ratio": CLOSED_LOOP_RANGE_RATIO if closed else 0.0}
        return data

    @model_validator(mode="after")
    def _needs_a_load(self) -> LoadPoint:
        if self.concurrency is None and self.request_rate_qps is None:
            raise ValueError("a load point needs concurrency, request_rate_qps, or both")
        return self

    def slug(self) -> str:
        """A readable name, used in the raw folder's name: ``in512-out128-c16``, ``in512-out128-qps2``, or
        ``in512-out128-rr0.5-c16`` for lengths drawn within ±50 % (fixed lengths add nothing, so the names of points
        recorded before lengths could vary stay as they were)."""
        parts = [f"in{self.input_len}", f"out{self.output_len}"]
        if self.random_range_ratio:
            parts.append(f"rr{self.random_range_ratio:g}")
        if self.request_rate_qps is not None:
            parts.append(f"qps{self.request_rate_qps:g}")
            if self.burstiness != 1.0:
                parts.append(f"b{self.burstiness:g}")
        if self.concurrency is not None:
            parts.append(f"c{self.concurrency}")
        if self.temperature is not None:
            parts.append(f"t{self.temperature:g}")
        return "-".join(parts)

    def longest_request(self) -> int:
        """The most tokens one request can hold, prompt and output together: vLLM's random dataset draws each length
        up to ``ceil((1 + r) · L)``."""
        r = self.random_range_ratio
        return math.ceil((1 + r) * self.input_len) + math.ceil((1 + r) * self.output_len)

    def measured_prompts(self, calibrated_rps: float | None, min_duration_s: float = MIN_DURATION_S) -> int:
        """How many requests the measured run needs to satisfy the duration rule.

        Closed loop: ``max(10 × concurrency, ceil(1.1 × rps × min_duration))`` where ``rps`` comes from a
        calibration run at the same concurrency (10 % head-room, since rps varies a little between runs).
        Open loop: the arrival process alone sets the duration, so ``ceil(rate × min_duration)``, and at least
        ``10 × concurrency`` when a cap is also set.
        """
        floor = MIN_REQUESTS_PER_CONCURRENCY * (self.concurrency or 1)
        if self.request_rate_qps is not None:
            return max(floor, math.ceil(self.request_rate_qps * min_duration_s))
        if calibrated_rps is None or calibrated_rps <= 0:
            return floor
        return max(floor, math.ceil(1.1 * calibrated_rps * min_duration_s))

    def warmup_prompts(self) -> int:
        """Requests of the calibration run that also warms the server up: two per slot, at least 8."""
        return max(8, 2 * (self.concurrency or 4))
