"""The only way the advisor sees a measurement: an oracle that shows a point's rows after its GPU time is paid.

``RecordedOracle`` serves the offline evaluation: it holds the recorded rows of one grid (one hardware) and reveals
one repeat of a point at a time, each for its *recorded* GPU time, plus the start-up of its server the first time a
config is touched. Asking for rows that were not paid for raises ``UnpaidPointError``; paying beyond the budget
raises ``BudgetError``. Before paying, the advisor may read the grid's *catalog* (which configs and loads exist, as a
case file names them, without a single measured number) and each point's price.

``LiveOracle`` is the same contract over a measuring function (the live runner, or a fake in tests): rows already
recorded on the same hardware count as measured and cost nothing.

Prices are GPU-seconds: a row's wall time (``run.budget.point_walls``: from the end of the point before it on its
server, or the server's ready time, to its own end; its duration where no server log covers it) and a config's
start-up (the median of its recorded start-ups, else its shape's), times the GPUs its engine uses. A grid is priced
from its own hardware's servers (``prices_per_hardware``): an H100's start-ups never price an H200 grid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import PlaybookError
from vllm_playbooks.results.identity import engine_gpus

#: The columns of the catalog: what a case file says about a point before it is measured.
CATALOG_COLUMNS = (
    "config_id",
    "engine_label",
    "model_shape",
    "engine_config_json",
    "max_num_seqs",
    "input_len",
    "output_len",
    "concurrency",
    "request_rate_qps",
)

PointKey = tuple[str, int, int, float, float]


class UnpaidPointError(PlaybookError):
    """Rows of a point were asked for that the advisor has not paid for."""


class BudgetError(PlaybookError):
    """A payment beyond the GPU-time budget, or for a repeat that does not exist."""


def _missing(value: Any) -> float:
    return -1.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def point_key(row: Any) -> PointKey:
    """(config id, input len, output len, concurrency, rate) of a row or catalog line; -1 for the load not used."""
    get = row.get if isinstance(row, dict) else (lambda name: getattr(row, name))
    return (
        str(get("config_id")),
        int(get("input_len")),
        int(get("output_len")),
        _missing(get("concurrency")),
        _missing(get("request_rate_qps")),
    )


@dataclass
class Payment:
    """One payment: the point, the repeat it revealed, and the GPU-seconds it cost (start-up included)."""

    key: PointKey
    repeat: int
    gpu_s: float
    startup_gpu_s: float


class Oracle:
    """What both oracles share: the catalog, prices, payments, the rows paid for and the budget."""

    def __init__(self, catalog: pd.DataFrame, budget_gpu_s: float) -> None:
        if not (budget_gpu_s > 0):
            raise BudgetError(f"the GPU-time budget must be positive, got {budget_gpu_s} GPU-s")
        self._catalog = catalog[list(CATALOG_COLUMNS)].drop_duplicates(
            subset=["config_id", "input_len", "output_len", "concurrency", "request_rate_qps"]
        )
        self.budget_gpu_s = float(budget_gpu_s)
        self.spent_gpu_s = 0.0
        self.payments: list[Payment] = []
        self._started: set[str] = set()
        self._seen: dict[PointKey, list[dict[str, Any]]] = {}

    def catalog(self) -> pd.DataFrame:
        """The points that exist (engine config and load), without any measured number."""
        return self._catalog.reset_index(drop=True).copy()

    def gpus(self, config_id: str) -> int:
        """GPUs one server of ``config_id`` uses (TP × PP)."""
        line = self._catalog[self._catalog["config_id"] == config_id].iloc[0]
        return engine_gpus(EngineConfig.model_validate(json.loads(line["engine_config_json"])))

    def left_gpu_s(self) -> float:
        """GPU-seconds of the budget not spent yet."""
        return self.budget_gpu_s - self.spent_gpu_s

    def runs_seen(self, key: PointKey) -> int:
        """Repeats of ``key`` paid for so far."""
        return len(self._seen.get(key, []))

    def rows(self, key: PointKey) -> list[dict[str, Any]]:
        """The rows of ``key`` paid for; ``UnpaidPointError`` when none was."""
        if key not in self._seen:
            raise UnpaidPointError(f"point {key} was not paid for: pay() its GPU time first")
        return list(self._seen[key])

    def paid_keys(self) -> list[PointKey]:
        """Every point with at least one paid repeat, in the order first paid."""
        return list(self._seen)

    # what each oracle defines
    def repeats_left(self, key: PointKey) -> int:  # pragma: no cover - abstract
        """How many more repeats of ``key`` can be paid for."""
        raise NotImplementedError

    def _run_price(self, key: PointKey) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _startup_price(self, config_id: str) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _measure(self, key: PointKey) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _free(self, key: PointKey) -> bool:
        """Whether the next repeat of ``key`` is already recorded on this hardware (no GPU time, no server)."""
        return False

    def _cost(self, key: PointKey) -> tuple[float, float]:
        if self._free(key):
            return 0.0, 0.0
        return self._run_price(key), (0.0 if key[0] in self._started else self._startup_price(key[0]))

    def price(self, key: PointKey) -> float:
        """GPU-seconds the next repeat of ``key`` costs, with its server's start-up if its config was not started."""
        return sum(self._cost(key))

    def pay(self, key: PointKey) -> dict[str, Any]:
        """Pay for the next repeat of ``key`` and return its row. ``BudgetError`` when no repeat is left or its price
        exceeds what is left of the budget (nothing is spent then)."""
        if self.repeats_left(key) < 1:
            raise BudgetError(f"point {key}: no repeat left to measure")
        run, startup = self._cost(key)
        if run + startup > self.left_gpu_s() + 1e-9:
            raise BudgetError(f"point {key} costs {run + startup:.0f} GPU-s; {self.left_gpu_s():.0f} are left")
        free = self._free(key)
        row = self._measure(key)
        if not free:
            self._started.add(key[0])
        self.spent_gpu_s += run + startup
        self.payments.append(Payment(key, self.runs_seen(key), run + startup, startup))
        self._seen.setdefault(key, []).append(row)
        return row


class RecordedOracle(Oracle):
    """The recorded rows of one grid as an oracle (the offline evaluation's; see the module's docstring).

    ``rows`` are one hardware's rows with a ``gpu_s`` column (the row's recorded GPU time, ``recorded_prices``);
    ``startups`` the GPU-seconds of each config's server start-up."""

    def __init__(self, rows: pd.DataFrame, startups: dict[str, float], budget_gpu_s: float) -> None:
        if rows["hardware"].nunique() != 1:
            raise BudgetError("a recorded oracle holds the rows of one hardware")
        super().__init__(rows, budget_gpu_s)
        ordered = rows.sort_values(["repeat", "measured_at"])
        self._rows: dict[PointKey, list[dict[str, Any]]] = {}
        for record in ordered.to_dict("records"):
            self._rows.setdefault(point_key(record), []).append(record)
        self._startups = dict(startups)

    def repeats_left(self, key: PointKey) -> int:
        return len(self._rows.get(key, [])) - self.runs_seen(key)

    def _run_price(self, key: PointKey) -> float:
        runs = self._rows[key]
        return float(runs[min(self.runs_seen(key), len(runs) - 1)]["gpu_s"])

    def _startup_price(self, config_id: str) -> float:
        return float(self._startups[config_id])

    def _measure(self, key: PointKey) -> dict[str, Any]:
        return dict(self._rows[key][self.runs_seen(key)])

    def full_grid_gpu_s(self) -> float:
        """What seeing every recorded row costs: every row's GPU time and one start-up per config."""
        rows = sum(float(r["gpu_s"]) for runs in self._rows.values() for r in runs)
        return rows + sum(self._startups[c] for c in {k[0] for k in self._rows})


class LiveOracle(Oracle):
    """Measuring through ``measure`` (the live runner: a catalog line in, one bench row out). ``recorded`` rows of the
    same hardware count as measured: revealed first, for no GPU time. Prices are estimates: ``run_estimate_gpu_s`` of
    a catalog line and ``startup_estimate_gpu_s`` of a config id (``run.budget``'s, in the live command).

    One server runs at a time: measuring a point of another config stops the one up, so a config measured before
    pays its start-up again when the search comes back to it."""

    def __init__(
        self,
        catalog: pd.DataFrame,
        budget_gpu_s: float,
        measure: Callable[[dict[str, Any]], dict[str, Any]],
        run_estimate_gpu_s: Callable[[dict[str, Any]], float],
        startup_estimate_gpu_s: Callable[[str], float],
        recorded: pd.DataFrame | None = None,
        max_repeats: int = 3,
    ) -> None:
        super().__init__(catalog, budget_gpu_s)
        self._lines = {point_key(line): line for line in self._catalog.to_dict("records")}
        self._recorded: dict[PointKey, list[dict[str, Any]]] = {}
        for record in [] if recorded is None else recorded.to_dict("records"):
            self._recorded.setdefault(point_key(record), []).append(record)
        self._measure_fn, self._run_estimate, self._startup_estimate = (
            measure,
            run_estimate_gpu_s,
            startup_estimate_gpu_s,
        )
        self.max_repeats = max_repeats

    def _free(self, key: PointKey) -> bool:
        return self.runs_seen(key) < len(self._recorded.get(key, []))

    def repeats_left(self, key: PointKey) -> int:
        if key not in self._lines:
            return 0
        return max(self.max_repeats, len(self._recorded.get(key, []))) - self.runs_seen(key)

    def _run_price(self, key: PointKey) -> float:
        return float(self._run_estimate(self._lines[key]))

    def _startup_price(self, config_id: str) -> float:
        return float(self._startup_estimate(config_id))

    def _measure(self, key: PointKey) -> dict[str, Any]:
        if self._free(key):
            return dict(self._recorded[key][self.runs_seen(key)])
        return dict(self._measure_fn(dict(self._lines[key])))

    def pay(self, key: PointKey) -> dict[str, Any]:
        """As ``Oracle.pay``; after a point is measured its config's server is the only one up."""
        measured = not self._free(key)
        row = super().pay(key)
        if measured:
            self._started = {key[0]}
        return row


def prices_per_hardware(rows: pd.DataFrame, servers: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, dict[str, float]]]:
    """``recorded_prices`` once per hardware of ``rows`` (one case's recorded rows, its ``hardware`` column), each from
    its own servers among ``servers`` (the case's server logs, ``run.budget.server_time``): a server ran on the
    hardware its log's record names, else that of the row measured nearest in time to its launch
    (``run.budget.server_values``)."""
    from vllm_playbooks.run.budget import server_values

    if rows.empty:
        return {}
    rows = rows.reset_index(drop=True)
    server_hardware = pd.Series(server_values(rows, servers, "hardware"), index=servers.index, dtype=object)
    return {
        str(hardware): recorded_prices(on_hardware.reset_index(drop=True), servers[server_hardware == hardware])
        for hardware, on_hardware in rows.groupby("hardware", sort=True)
    }


def recorded_prices(rows: pd.DataFrame, servers: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """``rows`` (one hardware's recorded rows of one case) with ``gpu_s`` (each row's recorded GPU time), and each
    config's start-up GPU-seconds, from ``servers`` (that hardware's server logs: ``prices_per_hardware``)."""
    from vllm_playbooks.run.budget import point_walls

    walls = point_walls(rows, servers)
    walls = walls.assign(end=pd.to_datetime(walls["measured_at"], utc=True))[["engine_label", "end", "wall_s"]]
    keyed = rows.assign(end=pd.to_datetime(rows["measured_at"], utc=True)).merge(
        walls, on=["engine_label", "end"], how="left"
    )
    gpus = keyed["engine_config_json"].map(lambda j: engine_gpus(EngineConfig.model_validate(json.loads(j))))
    priced = rows.assign(gpu_s=(keyed["wall_s"].fillna(keyed["duration_s"]) * gpus).to_numpy())
    started = servers[servers["startup_s"].notna()]
    by_label = started.groupby("engine_label")["startup_s"].median()
    shape_of = dict(zip(rows["engine_label"], rows["model_shape"], strict=False))
    by_shape = started.assign(shape=started["engine_label"].map(shape_of)).groupby("shape")["startup_s"].median()
    startups = {}
    for config_id, group in priced.groupby("config_id"):
        label, shape = group["engine_label"].iloc[0], group["model_shape"].iloc[0]
        seconds = by_label.get(label, by_shape.get(shape, float(started["startup_s"].median())))
        startups[str(config_id)] = float(seconds) * int(gpus[group.index[0]])
    return priced, startups
