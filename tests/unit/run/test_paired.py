"""Paired runs against the stand-in server: both servers up at once or alternated by restart, every point recording
its session; and under injected drift the paired comparison stays tight where the unpaired one widens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeBench, fake_server_argv
from vllm_playbooks.analysis.compare import paired_versus, versus_baseline
from vllm_playbooks.analysis.noise import cross_ratios, spread_of
from vllm_playbooks.config.pairing import BY_RESTART, CO_RESIDENT
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.results.conditions import with_run_conditions
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.run.case import run_case
from vllm_playbooks.run.plan import load_plan

CASE = "llama-8b-draft-model"


class Servers:
    """A server factory that starts the stand-in and remembers, per port, whether the config it stands for drafts;
    ``alive`` counts the stand-ins running when each one starts."""

    def __init__(self) -> None:
        self.drafts: dict[int, bool] = {}
        self.running: list[VllmServer] = []
        self.up_at_start: list[int] = []

    def __call__(self, argv: list[str], log: Path, port: int, **kwargs: Any) -> VllmServer:
        self.drafts[port] = "--speculative-config" in argv
        self.up_at_start.append(sum(server.alive() for server in self.running))
        server = VllmServer(fake_server_argv(port), log, port, **kwargs)
        self.running.append(server)
        return server


class DriftingBench(FakeBench):
    """A stand-in ``bench serve`` whose server gets slower with every measured run (``drift`` of the first run's
    speed per run), as a host that drifts would make it; the draft's server is ``speedup`` times faster."""

    def __init__(self, servers: Servers, drift: float = 0.03, speedup: float = 1.25) -> None:
        super().__init__()
        self.servers, self.drift, self.speedup = servers, drift, speedup
        self.measured: list[str] = []

    def __call__(self, argv: list[str], timeout_s: float | None = None) -> dict[str, Any]:
        result = super().__call__(argv)
        opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        if opt["--result-filename"] != "bench.json":
            return result
        drafts = self.servers.drafts[int(opt["--base-url"].rsplit(":", 1)[1])]
        self.measured.append("draft" if drafts else "off")
        speed = 1000.0 * (1.0 - self.drift * (len(self.measured) - 1)) * (self.speedup if drafts else 1.0)
        result["output_throughput"], result["total_token_throughput"] = speed, 5 * speed
        Path(opt["--result-dir"], opt["--result-filename"]).write_text(json.dumps(result))
        return result


def _plan(**overrides: Any):  # type: ignore[no-untyped-def]
    return load_plan(
        CASE,
        **{
            "engines": ["spec-off", "draft-1b-k4-a0.8"],
            "concurrency": [1, 16],
            "repeats": 3,
            "min_duration_s": 0.001,
            "gpu_memory_gib": 79.2,
            **overrides,
        },
    )


def _run(data: Path, **overrides: Any) -> tuple[Servers, DriftingBench]:
    servers = Servers()
    bench = DriftingBench(servers)
    report = run_case(
        _plan(**overrides), data=data, bench=bench, server_factory=servers, progress=False, gpu_sampler=None
    )
    assert len(report.measured) == 12 and not report.failed
    return servers, bench


def test_co_resident_servers_start_once_and_take_turns(data: Path) -> None:
    servers, bench = _run(data, paired=True)
    assert servers.up_at_start == [0, 1]  # the second started while the first was up
    assert bench.measured == ["off", "draft"] * 6
    rows = with_run_conditions(replay_case(CASE, data), data)
    assert set(rows["pair_mode"]) == {CO_RESIDENT} and rows["pair_session"].nunique() == 1
    assert sorted(rows["pair_position"].astype(int)) == list(range(12))
    assert set(rows["gpu_memory_utilization"]) == {0.45}
    assert rows["host_load_1m_max"].notna().all()  # the host was read during every run


def test_configs_that_do_not_fit_together_alternate_by_restart(data: Path) -> None:
    servers, bench = _run(data, paired=True, gpu_memory_gib=30)
    # off r0, draft r0 and r1, off r1 and r2, draft r2: four server lifetimes, one at a time
    assert servers.up_at_start == [0, 0, 0, 0]
    assert bench.measured == ["off"] * 2 + ["draft"] * 4 + ["off"] * 4 + ["draft"] * 2
    rows = with_run_conditions(replay_case(CASE, data), data)
    assert set(rows["pair_mode"]) == {BY_RESTART} and set(rows["gpu_memory_utilization"]) == {0.9}


def test_a_run_measured_on_its_own_belongs_to_no_pair(data: Path) -> None:
    _run(data)
    rows = with_run_conditions(replay_case(CASE, data), data)
    assert rows["pair_session"].isna().all()
    assert paired_versus(rows, "spec-off").empty


def test_under_drift_the_paired_interval_is_at_most_half_the_unpaired_one(data: Path, tmp_path: Path) -> None:
    """The stand-in loses 3 % of its speed per measured run. Unpaired, each side's runs are measured in a row, minutes
    apart from the other side's, so the ratios of one side's runs over the other's lie far apart (and off the true
    1.25x); paired, the draft's run and speculation off's run beside it share the drift, and their ratios stay close."""
    _run(data, paired=True)
    paired = paired_versus(with_run_conditions(replay_case(CASE, data), data), "spec-off")
    unpaired_data = tmp_path / "unpaired"
    unpaired_data.mkdir()
    _run(unpaired_data)
    unpaired = replay_case(CASE, unpaired_data)
    assert len(paired) == 2
    for line in paired.itertuples():
        at_load = unpaired[unpaired["concurrency"] == line.concurrency]
        off, draft = (
            at_load.loc[at_load["engine_label"] == label, "output_tok_s"] for label in ("spec-off", "draft-1b-k4-a0.8")
        )
        unpaired_spread = spread_of(cross_ratios(off, draft))
        assert line.pairs == 3 and line.ratio == pytest.approx(1.25, rel=0.05)
        assert unpaired_spread.spread_pct > 10.0 and unpaired_spread.median < 1.25 * 0.9  # drift between the sides
        assert line.paired_spread_pct <= 0.5 * unpaired_spread.spread_pct
        assert line.unpaired_spread_pct > line.paired_spread_pct  # the paired runs, taken unpaired, spread wider too
    judged = versus_baseline(with_run_conditions(replay_case(CASE, data), data))
    assert list(judged["pairs"]) == [3, 3] and list(judged["baseline_runs"]) == [3, 3]
    assert list(judged["ratio"]) == pytest.approx(list(paired["ratio"]))
    assert list(judged["band_pct"]) == pytest.approx([max(5.0, s) for s in paired["paired_spread_pct"]])
    assert list(versus_baseline(unpaired)["pairs"]) == [0, 0]  # judged unpaired, as before


def test_a_paired_run_measures_afresh_what_was_recorded_on_its_own_and_pairs_by_turn(data: Path) -> None:
    """Speculation off measured once on its own first (by restart, so its config is the paired plan's): the paired run
    still measures three runs of each config, numbering speculation off's new runs after the old one, and pairs
    them turn by turn."""
    alone = load_plan(CASE, concurrency=[1, 16], min_duration_s=0.001, engines=["spec-off"])
    run_case(alone, data=data, bench=FakeBench(), server_factory=Servers(), progress=False, gpu_sampler=None)
    _run(data, paired=True, gpu_memory_gib=30)
    rows = with_run_conditions(replay_case(CASE, data), data)
    off = rows[(rows["engine_label"] == "spec-off") & rows["pair_session"].notna()]
    assert sorted(off["repeat"]) == [1, 1, 2, 2, 3, 3]
    comparison = paired_versus(rows, "spec-off")
    assert list(comparison["pairs"]) == [3, 3]
