"""What a case still needs on one hardware (``vllm-playbooks plan``): recorded rows counted, failed start-ups and
engines the KV calculator refuses on that GPU named."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.unit.run.grid_rows import GRID_PLAN, grid_spec, run_rows
from vllm_playbooks import cli
from vllm_playbooks.cli import plan as plan_command
from vllm_playbooks.config.pairing import BY_RESTART, CO_RESIDENT
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run import budget, hardware_plan
from vllm_playbooks.run.hardware_plan import GpuMemory
from vllm_playbooks.run.plan import load_part, plan_from_dict


def test_rows_of_hardware_are_those_of_the_gpu_and_gpus_each_config_uses() -> None:
    rows = run_rows(("a", 1, 160), ("a", 4, 200), ("b", 1, 300)).assign(
        hardware=["nvidia-h200-x1-vllm0.26.0", "nvidia-a100-sxm4-80gb-x1-vllm0.26.0", "nvidia-h200-x2-vllm0.26.0"]
    )
    here = hardware_plan.rows_of_hardware(GRID_PLAN, rows, "NVIDIA H200", "0.26.0")
    assert here["concurrency"].tolist() == [1.0]  # b uses one GPU: its row on two is another hardware's
    assert hardware_plan.rows_of_hardware(GRID_PLAN, rows, "NVIDIA H200", "0.27.0").empty


def test_without_a_gpu_and_without_hardware_the_plan_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan_command, "gpu_here", lambda: None)
    assert cli.main(["plan", "--case", "llama-8b-draft-model"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no GPU" in out and "--gpu" in out


@pytest.mark.recorded_data
def test_the_plan_for_a_gpu_without_rows_lists_every_run_and_for_the_h200_only_what_it_lacks() -> None:
    from vllm_playbooks.results.stalls import mark_stalled
    from vllm_playbooks.results.store import load_runs
    from vllm_playbooks.run.plan import quiet_plan

    plan = quiet_plan("llama-8b-draft-model")[0]
    measured = mark_stalled(load_runs(plan.case))
    servers = budget.server_time(plan.case)
    a100 = hardware_plan.hardware_plan(plan, measured, servers, "NVIDIA A100-SXM4-80GB", "0.26.0")
    assert a100["to_measure"].sum() == len(plan.points()) and a100["recorded"].sum() == 0
    h200 = hardware_plan.hardware_plan(plan, measured, servers, "NVIDIA H200", "0.26.0")
    usable = measured[(measured["hardware"] == "nvidia-h200-x1-vllm0.26.0") & ~measured["stalled"]]
    lacking = 0
    for engine in plan.engines:
        for load in plan.loads_for(engine):
            runs = usable[(usable["engine_label"] == engine.label) & (usable["concurrency"] == load.concurrency)]
            lacking += max(plan.repeats - len(runs), 0)
    assert h200["to_measure"].sum() == lacking


def test_the_plan_warns_of_an_engine_whose_server_did_not_start_on_this_hardware_before() -> None:
    from vllm_playbooks.results.failed_starts import FAILED_START_COLUMNS
    from vllm_playbooks.results.identity import hardware_key

    plan = plan_from_dict(grid_spec())
    engines = {engine.label: engine for engine in plan.engines}
    h100 = hardware_key("NVIDIA H100 80GB HBM3", 1, "0.26.0")

    def failure(label: str, hardware: str, log: str, estimate: float) -> dict[str, object]:
        record = dict.fromkeys(FAILED_START_COLUMNS)
        record.update(
            hardware=hardware,
            config_id=engines[label].config_id(),
            engine_label=label,
            log=log,
            error="ValueError: No available memory for the cache blocks",
            cudagraph_estimate_gib=estimate,
            available_kv_gib=-2.59,
            gpu_memory_utilization=0.9,
        )
        return record

    failed = pd.DataFrame(
        [
            failure("a", h100, "a-2026-12-06T021537+0000.log", 9.40),
            failure("a", h100, "a-2026-12-06T031537+0000.log", 9.45),  # tried again: the latest is named
            failure("b", hardware_key("NVIDIA H200", 1, "0.26.0"), "b-2026-12-06T021537+0000.log", 9.45),  # other GPU
            failure("c", h100, "c-2026-12-06T021537+0000.log", 7.94),  # nothing left to measure: no note
        ]
    )
    table = pd.DataFrame({"engine_label": ["a", "b", "c", "big"], "to_measure": [3, 3, 0, 3]})
    lines = plan_command.failed_before(plan, table, failed, "NVIDIA H100 80GB HBM3", "0.26.0")
    assert len(lines) == 1 and lines[0].startswith("note: a did not start on this hardware before: ValueError")
    assert "9.45 GiB" in lines[0] and "a-2026-12-06T031537+0000.log" in lines[0] and "-2.59 GiB" in lines[0]


def test_the_calculator_refuses_only_engines_still_to_measure_that_cannot_fit() -> None:
    table = pd.DataFrame({"engine_label": ["a", "b", "c", "big"], "to_measure": [3, 0, 3, 3]})
    refused = hardware_plan.cannot_start(GRID_PLAN, table, 80.0)
    assert list(refused) == ["big"]  # a 70B in bf16 (~131 GiB of weights) on 80 GiB; the 8B fits
    assert refused["big"].startswith("engine big: weights") and "0.9 × 80.0 GiB" in refused["big"]
    assert hardware_plan.cannot_start(GRID_PLAN, table.assign(to_measure=[3, 0, 3, 0]), 80.0) == {}  # none left
    assert hardware_plan.cannot_start(GRID_PLAN, table, 200.0) == {}  # it fits a bigger GPU


def test_the_plan_leaves_out_of_its_estimate_the_servers_that_cannot_start() -> None:
    table = pd.DataFrame(
        {
            "engine_label": ["a", "big"],
            "model_shape": ["8b", "70b"],
            "gpus": [1, 2],
            "recorded": [0, 0],
            "to_measure": [3, 3],
            "starts": [1, 1],
            "startup_s": [300.0, 900.0],
            "cached_startup_s": [60.0, 120.0],
            "points_s": [300.0, 300.0],
            "gpu_minutes": [10.0, 40.0],
        }
    )
    lines = plan_command.describe_hardware_plan(table, "t", "GPU X", "0.26.0", cannot_start={"big"})
    assert "about 10 GPU-minutes, 1 server start-up(s) included; left out: big, which cannot start" in lines
    assert "about 50 GPU-minutes, 2 server" in plan_command.describe_hardware_plan(table, "t", "GPU X", "0.26.0")
    nothing = plan_command.describe_hardware_plan(table, "t", "GPU X", "0.26.0", cannot_start={"a", "big"})
    assert nothing.endswith("None of them can run here: a, big cannot start on this GPU (see below).")


def test_a_gpus_memory_comes_from_the_gpu_here_then_a_logged_start_up_then_the_datasheet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_playbooks.engine.gpu_sampler import GpuAtHand

    monkeypatch.setattr(hardware_plan, "gpu_at_hand", lambda _visible: GpuAtHand("NVIDIA H100 80GB HBM3", 79.646, "d"))
    logged = {"NVIDIA H200": 139.8}
    monkeypatch.setattr(hardware_plan, "logged_gpu_memory", lambda name, _data: logged.get(name))
    assert hardware_plan.gpu_memory_gib("NVIDIA H100 80GB HBM3") == GpuMemory(79.6, "here")
    assert hardware_plan.gpu_memory_gib("NVIDIA H200") == GpuMemory(139.8, "log")
    assert hardware_plan.gpu_memory_gib("NVIDIA A100-SXM4-80GB") == GpuMemory(80.0, "datasheet", "A100-80GB")
    assert hardware_plan.gpu_memory_gib("NVIDIA L40S") == GpuMemory(48.0, "datasheet", "L40S")
    assert hardware_plan.gpu_memory_gib("Acme X1") is None
    assert hardware_plan.gpu_memory_gib("NVIDIA A100-SXM4-40GB") is None  # not read as the 80 GB row


@pytest.mark.recorded_data
def test_the_plan_names_the_engines_that_cannot_start_on_the_named_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """The 32-expert DeepSeek-V3 shape holds more than one 80 GiB GPU in weights alone: the plan for an H100 says so
    instead of estimating its GPU time (a live run would refuse it at once), and says the part does not fit."""
    argv = [
        "plan",
        "--case",
        "deepseek-mtp",
        "--part",
        "1-verdict",
        "--gpu",
        "NVIDIA H100 80GB HBM3",
        "--vllm-version",
        "0.26.0",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "None of them can run here" in out
    assert "note: spec-off cannot start on NVIDIA H100 80GB HBM3 (" in out and "exceed 0.9 ×" in out
    assert "1-verdict does not fit NVIDIA H100 80GB HBM3" in out


@pytest.mark.parametrize(
    ("gpu", "memory", "fits"),
    [
        ("NVIDIA H100 80GB HBM3", 79.18, True),
        ("NVIDIA A100-SXM4-80GB", 80.0, True),
        ("NVIDIA H200", 139.8, True),
        ("NVIDIA L40S", 48.0, False),
    ],
)
def test_the_deepseek_deciding_parts_fit_one_80_gib_gpu(gpu: str, memory: float, fits: bool) -> None:
    """The 16-expert shape's configs need 71-77 GiB per GPU (weights 57.6 GiB, 58.7 with the MTP layer): an A100-80GB
    or H100 80GB starts them, an L40S (48 GB) does not, and says why."""
    for part in ("decide-v3-speedup", "decide-pr12755", "quick"):
        table = hardware_plan.part_fits(load_part("deepseek-mtp", part), memory)
        assert table["fits"].tolist() == [fits] * len(table), (part, gpu)
        assert table["needs_gib"].between(70.0, 78.0).all() and (table["gpus"] == 1).all()
        assert (table["why_not"] == "").all() if fits else table["why_not"].str.contains("exceed 0.9 ×").all()


def test_a_part_that_does_not_fit_says_which_config_and_how_much_it_needs() -> None:
    table = hardware_plan.part_fits(load_part("deepseek-mtp", "1-verdict"), 79.18)
    assert not table["fits"].any() and table["needs_gib"].min() > 100.0  # the 32-expert shape: 95.6 GiB of weights
    lines = plan_command.describe_part_fits(table, "1-verdict", "NVIDIA H100 80GB HBM3", 79.18, "a log")
    assert lines[0].startswith("1-verdict does not fit") and len(lines) == 1 + len(table)
    fitting = hardware_plan.part_fits(load_part("deepseek-mtp", "decide-v3-speedup"), 79.18)
    lines = plan_command.describe_part_fits(fitting, "decide-v3-speedup", "NVIDIA H100 80GB HBM3", 79.18, "a log")
    assert f"at most {fitting['needs_gib'].max():.1f} GiB per GPU" in lines[0]


@pytest.mark.recorded_data
def test_the_eagle3_k2_and_k5_refusals_on_the_h100_name_the_cuda_graph_reserve(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """k = 2 and k = 5 did not start on the H100: their CUDA-graph estimate (9.45 and 7.94 GiB logged) left no KV
    cache; the plan says so from the calculator (graphs of another integer class) and from the logged failure."""
    argv = [
        "plan",
        "--case",
        "gpt-oss-eagle3",
        "--part",
        "decide-draft-tokens",
        "--gpu",
        "NVIDIA H100 80GB HBM3",
        "--vllm-version",
        "0.26.0",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    for label in ("eagle3-k2-a0.71", "eagle3-k5-a0.71"):
        refusal = next(line for line in out.splitlines() if line.startswith(f"note: {label} cannot start"))
        assert "differ in integer class" in refusal
        assert any(
            line.startswith(
                f"note: {label} did not start on this hardware before: ValueError: No available "
                "memory for the cache blocks"
            )
            for line in out.splitlines()
        )
    assert "decide-draft-tokens does not fit NVIDIA H100 80GB HBM3" in out


def test_the_least_memory_is_where_the_calculator_turns_from_refusing_to_starting() -> None:
    from vllm_playbooks.config.capacity import check_fits
    from vllm_playbooks.errors import CapacityError

    least = hardware_plan.least_gpu_memory_gib(GRID_PLAN)
    big = next(engine for engine in GRID_PLAN.engines if engine.label == "big")
    check_fits(big, least)  # the 70B, the largest config, starts there...
    with pytest.raises(CapacityError):
        check_fits(big, least - 0.1)  # ...and not 0.1 GiB below
    small = plan_from_dict({**grid_spec(), "engines": [{"label": "a"}]})
    assert hardware_plan.least_gpu_memory_gib(small) < least / 4  # an 8B needs a fraction of a 70B's memory


def test_the_quick_checks_memory_is_a_figure_or_refused() -> None:
    least = hardware_plan.quick_check_gib("llama-8b-draft-model")
    assert least is not None and 0 < least < 80
    with pytest.raises(ConfigError, match="Unknown case 'nope'"):
        hardware_plan.quick_check_gib("nope")


@pytest.mark.recorded_data
def test_the_deepseek_quick_check_fits_an_h100_as_vllm_logged_it() -> None:
    """Its servers run the 16-expert shape: the memory they need lies below the H100's as vLLM logged it."""
    from vllm_playbooks.results.server_logs import logged_gpu_memory

    need = hardware_plan.quick_check_gib("deepseek-mtp")
    h100 = logged_gpu_memory("NVIDIA H100 80GB HBM3")
    assert h100 is not None and need is not None and 70.0 < need < h100


def test_one_after_another_a_later_server_of_a_shape_is_counted_with_its_shortest_start_up() -> None:
    table = pd.DataFrame(
        {
            "engine_label": ["a", "b", "big"],
            "model_shape": ["8b", "8b", "70b"],
            "gpus": [1, 1, 2],
            "recorded": [0, 0, 0],
            "to_measure": [3, 3, 3],
            "starts": [1, 1, 1],
            "startup_s": [300.0, 300.0, 600.0],
            "cached_startup_s": [60.0, 60.0, 120.0],
            "points_s": [300.0, 300.0, 300.0],
            "gpu_minutes": [10.0, 10.0, 30.0],
        }
    )
    lines = plan_command.describe_hardware_plan(table, "t", "GPU X", "0.26.0")
    # a cold; b finds a's caches: (60 + 300) / 60 = 6; big is the first of its shape: 2 × (600 + 300) / 60 = 30
    assert "about 50 GPU-minutes, 3 server" in lines and lines.endswith("its shape: about 46 GPU-minutes.")
    # a cannot start: b is the first 8B server on the machine, with no caches to find, and nothing is saved
    refused = plan_command.describe_hardware_plan(table, "t", "GPU X", "0.26.0", cannot_start={"a"})
    assert "about 40 GPU-minutes, 2 server" in refused and "One after another" not in refused


@pytest.mark.parametrize(("memory", "mode", "utilisation"), [(80.0, BY_RESTART, 0.9), (139.8, CO_RESIDENT, 0.45)])
def test_a_paired_part_is_planned_together_or_by_restart_as_it_fits_the_named_gpu(
    memory: float, mode: str, utilisation: float
) -> None:
    plan = hardware_plan.on_gpu_memory(
        hardware_plan.plan_inputs("discussion-13834", "quick"), "discussion-13834", "quick", memory
    ).plan
    assert plan.pairing == mode
    assert {engine.gpu_memory_utilization for engine in plan.engines} == {utilisation}
    assert hardware_plan.part_fits(plan, memory)["fits"].all()


def test_by_restart_the_plan_counts_each_lifetime_of_a_server_with_a_cached_start_up() -> None:
    counts = {}
    for memory, gpu in [(80.0, "NVIDIA H100 80GB HBM3"), (139.8, "NVIDIA H200")]:
        inputs = hardware_plan.on_gpu_memory(
            hardware_plan.plan_inputs("discussion-13834", "quick"), "discussion-13834", "quick", memory
        )
        table = hardware_plan.hardware_plan(inputs.plan, inputs.measured, inputs.servers, gpu, "0.26.0")
        assert table["to_measure"].tolist() == [3, 3]  # recorded runs were not paired: none counts
        counts[gpu] = table["starts"].tolist()
        first = table.iloc[0]
        assert first["gpu_minutes"] == pytest.approx(
            (first["startup_s"] + (first["starts"] - 1) * first["cached_startup_s"] + first["points_s"]) / 60.0
        )
    assert counts == {"NVIDIA H100 80GB HBM3": [2, 2], "NVIDIA H200": [1, 1]}  # A | B B | A A | B; side by side
