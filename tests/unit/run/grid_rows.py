"""A small grid and its recorded rows and servers, shared by the tests of GPU-time estimates and hardware plans."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.run.plan import plan_from_dict

T0 = pd.Timestamp("2026-12-31T23:58:00+00:00")


def server_rows(*rows: tuple[str, str, float, float]) -> pd.DataFrame:
    """(log, engine label, launch in s after T0, start-up s; NaN: never ready)."""
    return pd.DataFrame(
        [
            {"log": log, "engine_label": label, "launched_at": T0 + pd.Timedelta(seconds=at), "startup_s": startup}
            for log, label, at, startup in rows
        ]
    )


def run_rows(*rows: tuple[str, int, float]) -> pd.DataFrame:
    """(engine label, concurrency, end in s after T0) as recorded: measured_at an ISO string."""
    return pd.DataFrame(
        [
            {
                "engine_label": label,
                "model_shape": "llama-3.1-8b",
                "input_len": 8,
                "output_len": 8,
                "concurrency": float(c),
                "request_rate_qps": None,
                "measured_at": (T0 + pd.Timedelta(seconds=end)).isoformat(),
            }
            for label, c, end in rows
        ]
    )


def grid_spec() -> dict:  # type: ignore[type-arg]
    """A case of three 8B configs and a 70B one that never ran, at concurrency 1, 4 and 16."""
    return {
        "case": "t",
        "engine_defaults": {"model": "llama-3.1-8b", "max_model_len": 2048},
        "engines": [{"label": "a"}, {"label": "b"}, {"label": "c"}, {"label": "big", "model": "llama-3.3-70b"}],
        "loads": {"input_len": 8, "output_len": 8, "concurrency": [1, 4, 16], "random_range_ratio": 0.0},
    }


GRID_PLAN = plan_from_dict(grid_spec())
