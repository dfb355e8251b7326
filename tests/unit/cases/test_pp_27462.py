"""Issue #27462's case: the plan, the pipeline theory, the comparison and verdict, the sweep, the figures."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tests.conftest import FakeBench  # noqa: E402
from tests.unit.run.test_case import factory  # noqa: E402
from vllm_playbooks.analysis import whatif
from vllm_playbooks.book import pipeline_plots, plots
from vllm_playbooks.cases import pp_27462
from vllm_playbooks.cases.pp_27462 import sweep as pp_sweep
from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.errors import CapacityError, ConfigError
from vllm_playbooks.model import calibration, pipeline, prediction
from vllm_playbooks.results import raw
from vllm_playbooks.run import case as runner
from vllm_playbooks.run.plan import load_plan

CASE = pp_27462.CASE


# --------------------------------------------------------------------------------------------------------------------
# The case plan
# --------------------------------------------------------------------------------------------------------------------


def test_the_grid_is_three_layouts_of_the_8b_and_two_of_the_70b() -> None:
    plan = load_plan(CASE)
    assert len(plan.engines) == 20 and len(plan.points()) == 20
    seen = {
        (e.model, pipeline.layout(e.tensor_parallel_size, e.pipeline_parallel_size), e.max_num_seqs)
        for e in plan.engines
    }
    caps = (32, 64, 128, 256)
    assert seen == {("llama-3.1-8b", lay, n) for lay in ("PP=1", "PP=2", "TP=2") for n in caps} | {
        ("llama-3.3-70b", lay, n) for lay in ("PP=2", "TP=2") for n in caps
    }
    for point in plan.points():  # the offered load: twice the cap, 128 in / 256 out
        assert point.load.concurrency == 2 * point.engine.max_num_seqs
        assert (point.load.input_len, point.load.output_len) == (128, 256)
        assert point.engine.label.endswith(f"-mns{point.engine.max_num_seqs}")


def test_the_70b_in_bf16_on_one_gpu_is_refused_before_any_gpu_time() -> None:
    with pytest.raises(CapacityError, match=r"weights \(131.4 GiB\)"):
        load_plan(CASE, engines=["70b-pp2-mns32"], pipeline_parallel_size=1)


def test_a_fixed_concurrency_and_the_ray_executor_are_one_override_away() -> None:
    plan = load_plan(CASE, concurrency=[512], distributed_executor_backend="ray", engines=["8b-pp2-mns64"])
    (point,) = plan.points()
    assert point.load.concurrency == 512
    argv = point.engine.server_argv("127.0.0.1", 1)
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2" and argv[argv.index("--max-num-seqs") + 1] == "64"


def test_select_engines_by_cap() -> None:
    assert pp_27462.select_engines(CASE) is None
    assert pp_27462.select_engines(CASE, max_num_seqs=[64]) == [
        "8b-pp1-mns64",
        "8b-pp2-mns64",
        "8b-tp2-mns64",
        "70b-pp2-mns64",
        "70b-tp2-mns64",
    ]
    assert pp_27462.select_engines(CASE, engines=["8b-pp1-mns32", "8b-pp1-mns64"], max_num_seqs=[64]) == [
        "8b-pp1-mns64"
    ]
    with pytest.raises(ConfigError, match=r"no engine has max_num_seqs in \[48\]"):
        pp_27462.select_engines(CASE, max_num_seqs=[48])


# --------------------------------------------------------------------------------------------------------------------
# Theory
# --------------------------------------------------------------------------------------------------------------------


def test_microbatch_and_the_fix() -> None:
    assert pipeline.microbatch_size(256, 2) == 128 and pipeline.microbatch_size(64, 4) == 16
    assert pipeline.max_num_seqs_for(2, 128) == 256 and pipeline.max_num_seqs_for(4, 32) == 128
    table = pipeline.fix_table(2, [32, 64])
    assert table.max_num_seqs_to_set.tolist() == [64, 128]
    assert table.per_microbatch_batch_if_max_num_seqs_is_B.tolist() == [16.0, 32.0]
    with pytest.raises(ValueError):
        pipeline.max_num_seqs_for(0, 8)


def test_layout_names() -> None:
    assert [pipeline.layout(1, 1), pipeline.layout(1, 2), pipeline.layout(2, 1), pipeline.layout(2, 2)] == [
        "PP=1",
        "PP=2",
        "TP=2",
        "TP=2 PP=2",
    ]


@pytest.fixture(scope="module")
def fit() -> calibration.EfficiencyFit:
    return calibration.fit_efficiency(whatif.calibration_rows(), "H200-SXM")


@pytest.mark.recorded_data
def test_one_gpu_prediction_is_the_closed_loop_roofline(fit: calibration.EfficiencyFit) -> None:
    pred = pipeline.predicted_throughput(fit, "llama-3.1-8b", 64, 1, 1, 128, 256)
    row = {
        "model_shape": "llama-3.1-8b",
        "concurrency": 64,
        "input_len": 128,
        "output_len": 256,
        "num_speculative_tokens": 0,
    }
    assert pred["tpot_ms"] == pytest.approx(prediction.predict_tpot_ms(row, fit))
    assert pred["output_tok_s"] == pytest.approx(64 * 1000 / pred["tpot_ms"])


def test_without_overhead_two_stages_at_2n_are_two_gpus_at_n() -> None:
    ideal = calibration.EfficiencyFit("H200-SXM", 1.0, 1.0, 1.0, 0.0, 0, 0.0)
    one = pipeline.predicted_throughput(ideal, "llama-3.3-70b", 32, 1, 1, 128, 256)["output_tok_s"]
    pp2_n = pipeline.predicted_throughput(ideal, "llama-3.3-70b", 32, 1, 2, 128, 256)
    pp2_2n = pipeline.predicted_throughput(ideal, "llama-3.3-70b", 64, 1, 2, 128, 256)
    tp2_n = pipeline.predicted_throughput(ideal, "llama-3.3-70b", 32, 2, 1, 128, 256)
    assert pp2_n["microbatch"] == 16 and pp2_2n["microbatch"] == 32
    assert pp2_2n["output_tok_s"] == pytest.approx(2 * one) == pytest.approx(tp2_n["output_tok_s"])
    # weights dominate: half the batch per stage, barely faster than one GPU at N; half the throughput per GPU
    assert one < pp2_n["output_tok_s"] < 1.05 * one
    assert pp2_n["output_tok_s_per_gpu"] == pytest.approx(pp2_n["output_tok_s"] / 2)
    assert pp2_n["tpot_ms"] == pytest.approx(2 * pp2_n["stage_step_ms"])


def test_point_duration_follows_the_duration_rule() -> None:
    load = LoadPoint(input_len=128, output_len=256, concurrency=64)
    # 2560 tok/s = 10 requests/s: 128 warm-up + max(640, ceil(1.1 × 10 × 30) = 330) requests → 76.8 s
    assert pp_27462.estimated_point_s(load, 2560.0) == pytest.approx(76.8)
    # 25600 tok/s = 100 requests/s: 128 + max(640, ceil(1.1 × 100 × 30) = 3301, as the runner's float rounds) → 34.29 s
    assert pp_27462.estimated_point_s(load, 25600.0) == pytest.approx(34.29)
    assert pp_27462.estimated_point_s(load, 25600.0) * 100 - 128 == load.measured_prompts(100.0)


@pytest.mark.recorded_data
def test_planned_grid_counts_each_server_start_once(fit: calibration.EfficiencyFit) -> None:
    grid = pp_27462.planned_grid(load_plan(CASE), fit)
    assert len(grid) == 20 and (grid.concurrency == 2 * grid.max_num_seqs).all()
    assert grid.microbatch.tolist() == (grid.max_num_seqs / grid.layout.map({"PP=1": 1, "PP=2": 2, "TP=2": 1})).tolist()
    assert grid.estimated_startup_s.sum() == 12 * 60 + 8 * 150
    sweep = pp_27462.planned_grid(load_plan(CASE, engines=["8b-pp2-mns256"], concurrency=[32, 512]), fit)
    assert sweep.microbatch.tolist() == [16.0, 128.0]  # below the cap, the load sets the batch
    assert sweep.estimated_startup_s.tolist() == [60.0, 0.0]
    assert 40 < pp_27462.estimated_minutes(grid) < 90
    assert pp_sweep.predicted_best_pp(grid, "llama-3.1-8b") == "8b-pp2-mns256"
    assert pp_27462.planned_grid(load_plan(CASE, engines=["8b-pp1-mns32"])).columns.tolist()[-1] == "output_len"


# --------------------------------------------------------------------------------------------------------------------
# Comparison and verdict on hand-made rows
# --------------------------------------------------------------------------------------------------------------------


def _row(
    label: str, model: str, tp: int, pp: int, n: int, tok_s: float, concurrency: int | None = None
) -> dict[str, Any]:
    c = concurrency if concurrency is not None else 2 * n
    return {
        "point_id": f"{label}-x/in128-out256-c{c}-r0",
        "engine_label": label,
        "model_shape": model,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "max_num_seqs": n,
        "concurrency": c,
        "output_tok_s": tok_s,
        "tpot_p50_ms": 10.0,
        "gpu_name": "NVIDIA H200",
        "gpu_count": 2,
        "raw_path": f"runs/{CASE}/raw/{label}-x/in128-out256-c{c}-r0",
    }


def _frame(
    pp1: dict[int, float], pp2: dict[int, float], tp2: dict[int, float] | None = None, model: str = "llama-3.1-8b"
) -> pd.DataFrame:
    rows = [_row(f"pp1-{n}", model, 1, 1, n, v) for n, v in pp1.items()]
    rows += [_row(f"pp2-{n}", model, 1, 2, n, v) for n, v in pp2.items()]
    rows += [_row(f"tp2-{n}", model, 2, 1, n, v) for n, v in (tp2 or {}).items()]
    return pd.DataFrame(rows)


STARVING = _frame(
    pp1={32: 1000, 64: 1900, 128: 3400}, pp2={32: 1050, 64: 2000, 128: 3700, 256: 6500}, tp2={32: 1800, 64: 3500}
)


def test_saturated_keeps_rows_at_twice_the_cap_and_takes_medians() -> None:
    sweep = [_row("pp2-64", "llama-3.1-8b", 1, 2, 64, 999.0, concurrency=c) for c in (32, 64)]  # below 2 × 64
    again = [_row("pp2-64", "llama-3.1-8b", 1, 2, 64, 2200.0, concurrency=512)]  # saturated too: median of 2000, 2200
    sat = pp_27462.saturated(pd.concat([STARVING, pd.DataFrame(sweep + again)], ignore_index=True))
    row = sat[(sat.layout == "PP=2") & (sat.max_num_seqs == 64)].iloc[0]
    assert row.output_tok_s == 2100.0 and row.rows == 2 and row.output_tok_s_per_gpu == 1050.0
    assert len(sat) == 3 + 4 + 2
    assert pp_27462.saturated(STARVING.iloc[0:0]).empty


def test_comparison_pairs_n_with_2n() -> None:
    comp = pp_27462.pp_comparison(STARVING).set_index("max_num_seqs")
    assert comp.loc[32, "pp2_vs_pp1_pct"] == pytest.approx(5.0)
    assert comp.loc[32, "pp2_at_2n_vs_pp1_pct"] == pytest.approx(100.0)
    assert comp.loc[64, "pp2_at_2n_vs_pp1_pct"] == pytest.approx(100 * (3700 / 1900 - 1))
    assert comp.loc[32, "pp2_vs_tp2_pct"] == pytest.approx(100 * (1050 / 1800 - 1))
    assert pd.isna(comp.loc[256, "pp1_tok_s"]) and pd.isna(comp.loc[128, "tp2_tok_s"])


def test_verdict_reproduced_when_pp2_starves_and_the_fix_works() -> None:
    said = pp_27462.verdict(pp_27462.pp_comparison(STARVING), 20)
    assert said.startswith("Reproduced (")
    assert "llama-3.1-8b at max_num_seqs=32: PP=2 +5.0 % against PP=1, PP=2 with max_num_seqs=64 +100.0 %" in said
    assert "max_num_seqs=256" not in said.split(":", 1)[1].split("(")[0]  # N=256 has no PP=1 row: not judged


def test_verdict_not_reproduced_when_two_stages_at_n_are_fast() -> None:
    fast = _frame(pp1={32: 1000, 64: 1900}, pp2={32: 1900, 64: 3700})
    assert pp_27462.verdict(pp_27462.pp_comparison(fast), 20).startswith("Not reproduced")


def test_verdict_direction_only_and_the_threshold_matters() -> None:
    mixed = _frame(pp1={32: 1000, 64: 1900}, pp2={32: 1150, 64: 2500, 128: 2600})
    # N=32: +15 % at N, +150 % at 2N; N=64: +31.6 % at N, +36.8 % at 2N
    assert pp_27462.verdict(pp_27462.pp_comparison(mixed), 20).startswith("Direction only")  # N=64 too fast at N
    assert pp_27462.verdict(pp_27462.pp_comparison(mixed), 10).startswith("Not reproduced")  # both too fast at N
    assert pp_27462.verdict(pp_27462.pp_comparison(mixed), 35).startswith("Reproduced")
    assert pp_27462.verdict(pp_27462.pp_comparison(mixed), 40).startswith("Direction only")  # N=64: 2N not > 40 %


def test_no_verdict_without_the_three_sides() -> None:
    assert pp_27462.verdict(pp_27462.pp_comparison(STARVING.iloc[0:0])).startswith("Not measured yet")
    only_pp2 = _frame(pp1={}, pp2={32: 1, 64: 2})
    assert pp_27462.verdict(pp_27462.pp_comparison(only_pp2)).startswith("Not measured yet")


def test_tp_sentence_for_the_shape_that_needs_two_gpus() -> None:
    big = _frame(pp1={}, pp2={32: 500, 64: 950}, tp2={32: 960, 64: 1800}, model="llama-3.3-70b")
    said = pp_27462.tp_sentence(pp_27462.pp_comparison(big), "llama-3.3-70b")
    assert "at max_num_seqs=32, PP=2 -47.9 % and PP=2 with 64 -1.0 % against TP=2" in said
    assert "PP=2 with 128 not measured" in said
    assert "not both been measured" in pp_27462.tp_sentence(pp_27462.pp_comparison(STARVING), "llama-3.3-70b")


def test_best_setting_and_the_sweep_call() -> None:
    assert pp_27462.best_pp_setting(STARVING, "llama-3.1-8b") == "pp2-256"
    assert pp_27462.best_pp_setting(STARVING, "llama-3.3-70b") is None
    call = pp_sweep.sweep_call("8b-pp2-mns256", [32, 64])
    assert (
        call == "run_case(load_plan('pp-27462', engines=['8b-pp2-mns256'], concurrency=[32, 64])).raise_for_failures()"
    )
    rows = pd.concat([STARVING, pd.DataFrame([_row("pp2-256", "llama-3.1-8b", 1, 2, 256, 100.0, concurrency=32)])])
    assert pp_sweep.sweep_rows(rows, "pp2-256").concurrency.tolist() == [32, 512]
    assert pp_sweep.sweep_rows(rows, None).empty


def test_measurement_status_from_the_rows() -> None:
    plan = load_plan(CASE)
    empty = STARVING.iloc[0:0]
    assert pp_27462.measurement_status(empty, plan).startswith("Not measured yet: none of the 20 planned points")
    planned = plan.points()[0]
    row = _row(planned.engine.label, "llama-3.1-8b", 1, 1, 32, 1000.0)
    row["point_id"] = planned.point_id
    extra = _row("8b-pp1-mns32", "llama-3.1-8b", 1, 1, 32, 900.0, concurrency=8)
    status = pp_27462.measurement_status(pd.DataFrame([row, extra]), plan)
    assert (
        status
        == "1 of the 20 planned points are recorded, and 1 more point(s) (the concurrency sweep), on NVIDIA H200 ×2."
    )


# --------------------------------------------------------------------------------------------------------------------
# Live mode: the grid, then the sweep of the fastest PP=2 setting (stand-in server and bench)
# --------------------------------------------------------------------------------------------------------------------


def test_live_runs_the_grid_then_sweeps_the_best_pp2_setting(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr(runner, "require_vllm", lambda: None)
    monkeypatch.setattr(runner, "require_gpu", lambda: None)  # the stand-in servers need no GPU
    engines = ["8b-pp1-mns32", "8b-pp2-mns32"]
    df = pp_sweep.results_with_sweep(
        CASE,
        "live",
        {"engines": engines, "min_duration_s": 0.001},
        sweep_concurrency=[4],
        sweep_model="llama-3.1-8b",
        bench=FakeBench(),
        server_factory=factory(),
        progress=False,
        gpu_sampler=None,
    )
    assert sorted(zip(df.engine_label, df.concurrency, strict=True)) == [
        ("8b-pp1-mns32", 64),
        ("8b-pp2-mns32", 4),
        ("8b-pp2-mns32", 64),
    ]
    replay = pp_sweep.results_with_sweep(CASE, "replay", {"engines": engines}, [4], "llama-3.1-8b")
    assert len(replay) == 3
    with pytest.raises(ConfigError, match="no saturated PP=2 row of llama-3.3-70b"):
        pp_sweep.results_with_sweep(
            CASE,
            "live",
            {"engines": ["8b-pp1-mns32"], "min_duration_s": 0.001},
            [4],
            "llama-3.3-70b",
            bench=FakeBench(),
            server_factory=factory(),
            progress=False,
            gpu_sampler=None,
        )


# --------------------------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------------------------


def test_throughput_figure_draws_one_line_per_layout() -> None:
    ax = pipeline_plots.by_max_num_seqs(pp_27462.saturated(STARVING), "output_tok_s_per_gpu", title="8B")
    assert len(ax.get_lines()) >= 3 and ax.get_title() == "8B"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64", "128", "256"]
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"PP=1", "PP=2", "TP=2"} <= labels
    plt.close("all")


def test_figures_without_rows_say_not_measured() -> None:
    ax = pipeline_plots.by_max_num_seqs(pp_27462.saturated(STARVING.iloc[0:0]), "output_tok_s", title="70B")
    assert not ax.axison and ax.texts[0].get_text() == "70B: not measured yet"
    ax = pipeline_plots.gpu_utilization(pd.DataFrame(columns=["util_mean_pct", "gpu", "layout", "max_num_seqs"]))
    assert ax.texts[0].get_text() == "no GPU samples recorded yet"
    ax = plots.sweep_vs_concurrency(STARVING.iloc[0:0], "output_tok_s")
    assert ax.texts[0].get_text() == "not measured yet"
    plt.close("all")


def test_gpu_figure_one_line_per_gpu_and_layout() -> None:
    summary = pd.DataFrame(
        [
            {"layout": lay, "gpu": g, "max_num_seqs": n, "util_mean_pct": u}
            for lay, g, n, u in [
                ("PP=2", 0, 32, 60.0),
                ("PP=2", 1, 32, 55.0),
                ("PP=2", 0, 64, 80.0),
                ("PP=2", 1, 64, 75.0),
                ("TP=2", 0, 32, 90.0),
                ("TP=2", 1, 32, 90.0),
                ("TP=2", 0, 64, 95.0),
                ("TP=2", 1, 64, float("nan")),
            ]
        ]
    )
    ax = pipeline_plots.gpu_utilization(summary)
    drawn = [line for line in ax.get_lines() if len(line.get_xdata()) > 0]
    assert len(drawn) >= 4 and ax.get_ylim() == (0.0, 105.0)
    ys = sorted(y for line in drawn for y in line.get_ydata())
    assert 95.0 in ys and 55.0 in ys  # the NaN reading is left out, not drawn as 0
    plt.close("all")


@pytest.mark.recorded_data
def test_the_sweep_engine_measured_else_predicted_else_none(fit: calibration.EfficiencyFit) -> None:
    grid = pp_27462.planned_grid(load_plan(CASE), fit)
    assert pp_sweep.sweep_engine(STARVING.iloc[0:0], grid, "llama-3.1-8b") == "8b-pp2-mns256"  # predicted
    assert pp_sweep.sweep_engine(STARVING, grid, "llama-3.1-8b") == "pp2-256"  # measured wins
    assert pp_sweep.sweep_engine(STARVING, grid, None) is None
    assert pp_sweep.sweep_grid(CASE, None, [32], fit).empty and pp_27462.estimated_minutes(pd.DataFrame()) == 0.0
    sweep = pp_sweep.sweep_grid(CASE, "8b-pp2-mns256", [32, 1024], fit)
    assert sweep.concurrency.tolist() == [32, 1024] and sweep.estimated_startup_s.tolist() == [60.0, 0.0]
    assert pp_sweep.sweep_note(None, [32], 0).startswith("No concurrency sweep")
    assert "run_case(load_plan('pp-27462', engines=['x'], concurrency=[32]))" in pp_sweep.sweep_note("x", [32], 2)


def test_a_layout_keeps_its_colour_across_figures() -> None:
    order, palette = pipeline_plots.layout_palette(["TP=2", "PP=2"])
    full_order, full = pipeline_plots.layout_palette(["PP=1", "PP=2", "TP=2"])
    assert order == ["PP=2", "TP=2"] and full_order == ["PP=1", "PP=2", "TP=2"]
    assert palette["PP=2"] == full["PP=2"] and palette["TP=2"] == full["TP=2"] != full["PP=2"]
    ax = pipeline_plots.by_max_num_seqs(
        pp_27462.saturated(_frame(pp1={}, pp2={32: 1.0, 64: 2.0}, tp2={32: 2.0})), "output_tok_s"
    )
    colours = {t.get_text(): h.get_color() for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles)}
    assert matplotlib.colors.to_rgb(colours["PP=2"]) == pytest.approx(full["PP=2"])
    plt.close("all")


def test_verdict_label_is_the_head_of_the_verdict() -> None:
    for frame in (STARVING, STARVING.iloc[0:0], _frame(pp1={32: 1000}, pp2={32: 1900, 64: 1950})):
        comparison = pp_27462.pp_comparison(frame)
        assert pp_27462.verdict(comparison).startswith(pp_27462.verdict_label(comparison))
    assert (
        pp_27462.verdict_label(pp_27462.pp_comparison(_frame(pp1={32: 1000}, pp2={32: 1900, 64: 1950})))
        == "Not reproduced"
    )


@pytest.mark.recorded_data
def test_recorded_start_ups_are_medians_over_server_lifetimes(tmp_path: Path) -> None:
    from vllm_playbooks.paths import data_dir

    measured = pp_27462.recorded_startup_s()
    lifetimes: dict[str, set[tuple[str, float]]] = {}  # per shape, each server (config, start-up) once
    for path in (data_dir() / "runs").glob(f"*/raw/*/*/*/{raw.POINT_FILE}"):
        point = json.loads(path.read_text(encoding="utf-8"))
        if point.get("server_startup_s") and path.parent.parent.parent.name.startswith("nvidia-h200-"):
            server = (point["config_id"], float(point["server_startup_s"]))
            lifetimes.setdefault(point["model_shape"], set()).add(server)
    # a shape never started (the bf16 70B so far) has no entry: the plan assumes STARTUP_S for it
    assert "llama-3.1-8b" in measured and set(measured) == set(lifetimes)
    for shape, seconds in lifetimes.items():
        assert measured[shape] == statistics.median(s for _, s in seconds), shape
    case = tmp_path / "runs" / "c"
    for hardware, config, load, seconds in [
        ("nvidia-h200-x1-vllm0", "a", "x", 100.0),
        ("nvidia-h200-x1-vllm0", "a", "y", 100.0),
        ("nvidia-h200-x1-vllm0", "b", "x", 40.0),
        ("nvidia-h200-x1-vllm0", "c", "x", 70.0),
        ("nvidia-h100-80gb-hbm3-x1-vllm0", "d", "x", 500.0),
    ]:
        point = case / "raw" / hardware / config / load
        point.mkdir(parents=True)
        for name in raw.REQUIRED_FILES:
            (point / name).write_text("{}")
        (point / raw.POINT_FILE).write_text(
            json.dumps({"model_shape": "m", "config_id": config, "server_startup_s": seconds})
        )
    # a's one lifetime counts once: median(100, 40, 70); the H100's server counts for the H100 only
    assert pp_27462.recorded_startup_s(tmp_path) == {"m": 70.0}
    assert pp_27462.recorded_startup_s(tmp_path, "H100-SXM") == {"m": 500.0}


@pytest.mark.recorded_data
def test_the_models_verdict_comes_from_the_same_comparison(fit: calibration.EfficiencyFit) -> None:
    grid = pp_27462.planned_grid(load_plan("pp-27462"), fit)
    rows = pp_27462.predicted_rows(grid).set_index("engine_label")
    assert (rows.loc["8b-tp2-mns64", ["tensor_parallel_size", "pipeline_parallel_size"]].tolist()) == [2, 1]
    assert (rows.loc["70b-pp2-mns64", ["tensor_parallel_size", "pipeline_parallel_size"]].tolist()) == [1, 2]
    comparison = pp_27462.pp_comparison(rows.reset_index()).set_index(["model_shape", "max_num_seqs"])
    pp1, pp2 = rows.loc["8b-pp1-mns32", "output_tok_s"], rows.loc["8b-pp2-mns32", "output_tok_s"]
    assert comparison.loc[("llama-3.1-8b", 32), "pp2_vs_pp1_pct"] == pytest.approx(100 * (pp2 / pp1 - 1))
    assert pp_27462.verdict_label(comparison.reset_index()) == "Reproduced"  # the roofline starves two stages too


def test_measured_beside_predicted() -> None:
    measured = pd.DataFrame(
        {"model_shape": ["m"], "engine_label": ["a"], "layout": ["PP=2"], "max_num_seqs": [64], "output_tok_s": [800.0]}
    )
    grid = pd.DataFrame({"engine_label": ["a", "b"], "predicted_output_tok_s": [1000.0, 5.0]})
    out = pp_27462.measured_vs_predicted(measured, grid)
    assert out.prediction_error_pct.tolist() == [25.0] and out.predicted_output_tok_s.tolist() == [1000.0]


def test_the_sweep_setting_comes_from_the_gpu_that_measured_last() -> None:
    # a faster PP=2 setting recorded on another GPU earlier must not choose what this machine sweeps
    ours = STARVING.assign(gpu_name="NVIDIA A100-SXM4-80GB", measured_at="2026-12-06T10:00:00+00:00")
    recorded = pd.DataFrame([_row("pp2-64", "llama-3.1-8b", 1, 2, 64, 99_999.0)]).assign(
        gpu_name="NVIDIA H200", measured_at="2026-11-30T10:00:00+00:00"
    )
    rows = pd.concat([recorded, ours], ignore_index=True)
    assert pp_27462.best_pp_setting(rows, "llama-3.1-8b") == "pp2-64"
    here = pp_sweep.rows_of_newest_gpu(rows)
    assert set(here["gpu_name"]) == {"NVIDIA A100-SXM4-80GB"} and len(here) == len(STARVING)
    assert pp_27462.best_pp_setting(here, "llama-3.1-8b") == "pp2-256"
    assert pp_sweep.rows_of_newest_gpu(rows.iloc[0:0]).empty
