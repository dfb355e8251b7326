"""Engine steps from vLLM's step histogram: parsing, per-point summary, and what the #27462 runs show."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FROZEN
from vllm_playbooks.analysis import runs, whatif
from vllm_playbooks.book import pipeline_plots, run_notes
from vllm_playbooks.cases import load_words, pp_27462
from vllm_playbooks.cases.gpt_oss_eagle3 import step_costs
from vllm_playbooks.engine.metrics import parse_histogram
from vllm_playbooks.errors import ServerError
from vllm_playbooks.model import calibration
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.engine_steps import FILL_THRESHOLD, read_engine_steps, step_histogram, step_summary
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.results.store import runs_file

BOUNDS = (1, 8, 16, 32, 64, 128)


def _prom(steps: list[int], generated: float, engines: int = 1) -> str:
    """Prometheus text of a server that ran ``steps`` (tokens per step), split over ``engines`` label sets."""
    lines = [
        "# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.",
        "# TYPE vllm:iteration_tokens_total histogram",
    ]
    for engine in range(engines):
        mine = steps[engine::engines]
        for bound in (*BOUNDS, math.inf):
            le = "+Inf" if math.isinf(bound) else f"{float(bound)}"
            count = sum(1 for s in mine if s <= bound)
            lines.append(f'vllm:iteration_tokens_total_bucket{{engine="{engine}",le="{le}"}} {float(count)}')
        lines.append(f'vllm:iteration_tokens_total_count{{engine="{engine}"}} {float(len(mine))}')
        lines.append(f'vllm:iteration_tokens_total_sum{{engine="{engine}"}} {float(sum(mine))}')
    lines += [
        "# HELP vllm:generation_tokens_total Generation tokens.",
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0"}} {generated}',
    ]
    return "\n".join(lines) + "\n"


def test_a_histogram_is_summed_over_label_sets_and_differenced() -> None:
    before = parse_histogram(_prom([3, 60], 10.0, engines=2), "vllm:iteration_tokens_total")
    after = parse_histogram(_prom([3, 60, 4, 62, 100], 200.0, engines=2), "vllm:iteration_tokens_total")
    assert before is not None and after is not None
    assert after.bounds == (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, math.inf)
    run = after.minus(before)
    assert (run.count, run.total) == (3.0, 166.0)
    assert run.per_bucket == (0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0)  # 4 in (1, 8], 62 in (32, 64], 100 in (64, 128]
    with pytest.raises(ServerError, match="restarted"):
        before.minus(after)


def test_a_server_without_the_histogram_gives_none() -> None:
    assert (
        parse_histogram(
            "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 5.0\n",
            "vllm:iteration_tokens_total",
        )
        is None
    )


def _point(tmp_path: Path, before: str, after: str) -> Path:
    (tmp_path / raw.METRICS_BEFORE).write_text(before)
    (tmp_path / raw.METRICS_AFTER).write_text(after)
    return tmp_path


def test_two_stages_with_one_full_and_one_nearly_empty_microbatch(tmp_path: Path) -> None:
    """PP=2 at cap 64: the microbatches alternate between 62 and 2 decoding sequences (one token each)."""
    steps = [62, 2] * 50
    point = _point(tmp_path, _prom([], 0.0), _prom(steps, float(sum(steps))))
    run = read_engine_steps(point)
    assert run is not None and run.steps == 100 and run.tokens_per_step == 32.0
    assert run.small_step_frac() == 0.5
    with pytest.raises(ValueError, match="not a bucket bound"):
        run.small_step_frac(10)
    row = pd.DataFrame(
        [
            {
                "point_id": "p",
                "engine_label": "pp2-64",
                "model_shape": "m",
                "tensor_parallel_size": 1,
                "pipeline_parallel_size": 2,
                "max_num_seqs": 64,
                "concurrency": 128,
                "output_tok_s": 1.0,
                "raw_path": point.name,
                "mean_acceptance_length": float("nan"),
            }
        ]
    )
    summary = step_summary(row, tmp_path.parent).iloc[0]
    assert summary.sequences_per_step == 32.0 and summary.running_mean == 64.0 and summary.fill == 1.0
    shares = step_histogram(row, tmp_path.parent).set_index("tokens_at_most").step_share
    assert shares[8.0] == 0.5 and shares[64.0] == 0.5 and shares.sum() == pytest.approx(1.0)


def test_speculative_rows_count_sequences_not_tokens(tmp_path: Path) -> None:
    """With 3 tokens per sequence and step (acceptance length 3), 30 output tokens per step are 10 sequences."""
    point = _point(tmp_path, _prom([], 0.0), _prom([40] * 10, 300.0))
    row = pd.DataFrame(
        [
            {
                "point_id": "p",
                "engine_label": "spec",
                "model_shape": "m",
                "tensor_parallel_size": 1,
                "pipeline_parallel_size": 1,
                "max_num_seqs": 256,
                "concurrency": 10,
                "output_tok_s": 1.0,
                "raw_path": point.name,
                "mean_acceptance_length": 3.0,
            }
        ]
    )
    summary = step_summary(row, tmp_path.parent).iloc[0]
    assert summary.running_mean == 10.0 and summary.batch_allowed == 10.0 and summary.fill == 1.0


# ------------------------------------------------------------------------------------------------------------------
# The recorded #27462 runs (2 × H200, vLLM 0.26.0), frozen: the ten points of 2026-11-30 (tests/fixtures/recorded)
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pp_rows() -> pd.DataFrame:
    return replay_case(pp_27462.CASE, FROZEN)


@pytest.fixture(scope="module")
def pp_steps(pp_rows: pd.DataFrame) -> pd.DataFrame:
    return step_summary(pp_rows, FROZEN).set_index("engine_label")


def test_pipeline_stages_take_twice_the_steps_at_half_the_sequences(pp_steps: pd.DataFrame) -> None:
    for cap in (32, 64, 128):
        one, two = pp_steps.loc[f"8b-pp1-mns{cap}"], pp_steps.loc[f"8b-pp2-mns{cap}"]
        assert one.fill > 0.95 and two.fill > 0.95  # the cap set the batch
        assert two.sequences_per_step == pytest.approx(one.sequences_per_step / 2, rel=0.03)
        assert two.engine_steps == pytest.approx(2 * one.engine_steps, rel=0.1)


def test_at_small_caps_one_microbatch_holds_nearly_every_sequence(pp_steps: pd.DataFrame) -> None:
    for cap in (32, 64):
        assert pp_steps.loc[f"8b-pp2-mns{cap}"].small_step_frac == pytest.approx(0.5, abs=0.02)
        assert pp_steps.loc[f"8b-pp1-mns{cap}"].small_step_frac < 0.01
    assert pp_steps.loc["8b-pp2-mns128"].small_step_frac < 0.01  # at 128 the two microbatches are both large


def test_a_cap_of_256_counts_as_filled_by_the_servers_own_log(pp_rows: pd.DataFrame, pp_steps: pd.DataFrame) -> None:
    """Both servers at max_num_seqs 256 logged about 256 running requests through their measured runs (the
    counters' estimate read 52 % and 73 %): no point is left out, so PP=2 at 256 judges the fix at N = 128."""
    left_out = pp_27462.unfilled(pp_rows, pp_steps.reset_index())
    assert left_out.empty and pp_27462.unfilled_note(left_out).startswith("Every point that offered twice its cap")
    assert (pp_steps.loc[["8b-pp1-mns256", "8b-pp2-mns256"], "fill_source"] == "server log").all()
    comparison = pp_27462.pp_comparison(pp_rows, steps=pp_steps.reset_index()).set_index("max_num_seqs")
    assert not math.isnan(comparison.loc[128, "pp2_at_2n_tok_s"])


def test_the_one_gpu_points_ran_two_at_a_time(pp_rows: pd.DataFrame) -> None:
    beside = load_words.overlap_table(pp_rows).set_index("engine_label").beside
    assert beside.to_dict() == {
        "8b-pp1-mns128": "8b-pp1-mns256 at concurrency 512",
        "8b-pp1-mns256": "8b-pp1-mns128 at concurrency 256",
        "8b-pp1-mns32": "8b-pp1-mns64 at concurrency 128",
        "8b-pp1-mns64": "8b-pp1-mns32 at concurrency 64",
    }


def test_overlap_needs_the_windows_to_intersect() -> None:
    rows = pd.DataFrame(
        {
            "point_id": ["a", "b", "c"],
            "engine_label": ["x", "y", "z"],
            "concurrency": [1, 2, 3],
            "request_rate_qps": [None] * 3,
            "duration_s": [60.0, 30.0, 10.0],
            "measured_at": ["2026-01-01T00:01:00+00:00", "2026-01-01T00:00:40+00:00", "2026-01-01T00:02:00+00:00"],
        }
    )
    # a: 00:00:00-00:01:00, b: 00:00:10-00:00:40 (inside a), c: 00:01:50-00:02:00 (alone)
    pairs = runs.overlapping_points(rows)
    assert pairs[["point_id", "beside_point_id", "beside_concurrency"]].values.tolist() == [
        ["a", "b", 2],
        ["b", "a", 1],
    ]
    assert load_words.overlap_table(rows)[["engine_label", "load", "beside"]].values.tolist() == [
        ["x", "concurrency 1", "y at concurrency 2"],
        ["y", "concurrency 2", "x at concurrency 1"],
    ]


def test_a_run_beside_two_others_names_both_and_counts_once() -> None:
    rows = pd.DataFrame(
        {
            "point_id": ["a", "b", "c"],
            "engine_label": ["x", "y", "z"],
            "concurrency": [None, 2, 3],
            "request_rate_qps": [4.0, None, None],
            "duration_s": [60.0, 30.0, 30.0],
            "measured_at": ["2026-01-01T00:01:00+00:00", "2026-01-01T00:00:40+00:00", "2026-01-01T00:00:59+00:00"],
        }
    )
    # a overlaps b and c; b and c overlap each other (00:00:10-00:00:40 and 00:00:29-00:00:59)
    table = load_words.overlap_table(rows).set_index("point_id")
    assert table.loc["a", "beside"] == "y at concurrency 2; z at concurrency 3" and table.loc["a", "load"] == "4 QPS"
    assert len(table) == 3 and len(runs.overlapping_points(rows)) == 6


def _repeats(label: str, starts: list[int], other: str | None = None) -> list[dict[str, object]]:
    """Runs of one point ``label`` at concurrency 32, 60 s each, starting at the given minutes of one day; ``other``
    adds one run of another point beside the first."""
    rows = [
        {
            "point_id": f"gpu/{label}/c32-r{i}",
            "engine_label": label,
            "concurrency": 32,
            "request_rate_qps": None,
            "duration_s": 60.0,
            "measured_at": f"2026-01-01T00:{minute + 1:02d}:00+00:00",
        }
        for i, minute in enumerate(starts)
    ]
    if other is not None:
        rows.append({**rows[0], "point_id": f"gpu/{other}/c32-r0", "engine_label": other})
    return rows


def test_overlapped_runs_leave_the_comparisons_once_their_point_ran_three_times_alone() -> None:
    settled = pd.DataFrame(_repeats("draft", [0, 10, 20, 30], other="beside"))  # r0 overlapped, r1-r3 alone
    kept = runs.set_aside_overlapped(settled)
    # draft's overlapped run leaves; "beside" ran once, overlapped, and keeps its only run
    assert kept.point_id.tolist() == [*(f"gpu/draft/c32-r{i}" for i in (1, 2, 3)), "gpu/beside/c32-r0"]
    assert runs.set_aside_overlapped(kept).equals(kept)
    note = run_notes.overlap_note(settled)
    assert note.endswith(
        "The others ran alone. 1 of them is left out of the comparisons and verdicts: its point was "
        "measured at least 3 times alone."
    )
    short = pd.DataFrame(_repeats("draft", [0, 10, 20], other="beside"))  # only two runs alone: every run counts
    assert len(runs.set_aside_overlapped(short)) == len(short)
    assert run_notes.overlap_note(short).endswith("The others ran alone.")


def test_the_step_figure_draws_only_buckets_some_step_fell_in(pp_rows: pd.DataFrame) -> None:

    rows = pp_rows[pp_rows.engine_label.isin(["8b-pp1-mns64", "8b-pp2-mns64"])]
    ax = pipeline_plots.step_shares(step_histogram(rows, FROZEN), title="cap 64")
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["2–8", "33–64", "129–256"]  # PP=2's two microbatches, and steps with a prompt (1.2 % of PP=1's)
    assert "under 1% of steps left out" in ax.get_xlabel()
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"PP=1", "PP=2"}
    empty = pipeline_plots.step_shares(step_histogram(rows.iloc[0:0], FROZEN), title="cap 64")
    assert "no step histogram recorded" in empty.texts[0].get_text()


def test_the_overlap_note_names_the_pairs_and_says_when_none_overlapped(pp_rows: pd.DataFrame) -> None:
    note = run_notes.overlap_note(pp_rows)
    assert note.startswith("4 of the 10 points ran at the same time as another point")
    assert "`8b-pp1-mns32` at concurrency 64 beside 8b-pp1-mns64 at concurrency 128" in note
    alone = pp_rows[pp_rows.pipeline_parallel_size == 2]
    assert run_notes.overlap_note(alone) == "Each of the 4 points ran alone on its host."


@pytest.mark.recorded_data
def test_the_overlap_note_counts_many_overlapping_points_per_configuration() -> None:
    """More overlapping points than a sentence can name (DeepSeek's 2-GPU sessions ran two servers at a time):
    counted per configuration, the pairs left to the table; the count is the rows whose window (its end less its
    duration) meets another row's, read from the recorded table."""
    deepseek = replay_case("deepseek-mtp")
    table = pd.read_csv(runs_file("deepseek-mtp", data_dir()))
    end = pd.to_datetime(table.measured_at, utc=True)
    start = end - pd.to_timedelta(table.duration_s, unit="s")
    overlapping = table[[((start < e) & (end > s)).sum() > 1 for s, e in zip(start, end, strict=True)]]
    assert len(overlapping) > run_notes.OVERLAPS_LISTED
    many = run_notes.overlap_note(deepseek)
    assert many.startswith(f"{len(overlapping)} of the {len(deepseek)} points ran at the same time as another point")
    counts = overlapping.engine_label.value_counts()
    assert all(f"`{label}` {count}" in many for label, count in counts.items()) and " beside " not in many
    assert many.endswith("The table below names what each ran beside; the others ran alone.")


@pytest.mark.recorded_data
def test_the_roofline_overestimates_every_measured_point_but_keeps_the_pattern(
    pp_rows: pd.DataFrame, pp_steps: pd.DataFrame
) -> None:
    """The frozen #27462 points against the roofline fitted on the recorded calibration rows."""
    from vllm_playbooks.run.plan import load_plan

    grid = pp_27462.planned_grid(
        load_plan(pp_27462.CASE), calibration.fit_efficiency(whatif.calibration_rows(), "H200-SXM")
    )
    table = pp_27462.measured_vs_predicted(pp_27462.saturated(pp_rows, steps=pp_steps.reset_index()), grid)
    assert len(table) == 10 and (table.prediction_error_pct > 0).all()
    assert pp_27462.verdict_label(pp_27462.pp_comparison(pp_27462.predicted_rows(grid))) == "Reproduced"


@pytest.mark.recorded_data
def test_recorded_gains_are_saved_steps_over_step_cost() -> None:
    """On the recorded gpt-oss runs, the step factors multiply back to the measured gain: wall time is steps times
    time per step, read from the scrapes and the bench's duration independently of the bench's throughput."""
    from vllm_playbooks.results.engine_steps import with_step_times

    runs = replay_case("gpt-oss-eagle3")
    stepped = with_step_times(runs)
    assert stepped.engine_steps.notna().all() and (stepped.ms_per_step > 0).all()
    factors = step_costs.step_factors(stepped, {"chat": (230, 203), "swe": (13000, 203)}, "eagle3-k3-a0.71")
    assert set(factors.profile) == {"chat", "swe"}
    implied = 100 * (factors.fewer_steps_x / factors.step_cost_x - 1)
    assert (implied - factors.gain_pct).abs().max() < 1.0
    assert factors.fewer_steps_x.between(1.0, 3.0).all()  # k = 3, α 0.71: 2.57 tokens a step expected


def test_the_fill_comes_from_the_servers_own_log_where_it_sampled_the_run(pp_rows: pd.DataFrame) -> None:
    """PP=2 at max_num_seqs 256 (concurrency 512): its server logged 'Running: 256 reqs' in 6 of the 8 stats lines of
    the measured run (244 and 250 in the others), so it ran filled, although the counters' estimate, which counts the
    ramp-up and drain steps of two pipeline stages, reads 73 %."""
    from vllm_playbooks.results.server_logs import logged_running, running_samples

    row = pp_rows[pp_rows["engine_label"] == "8b-pp2-mns256"]
    summary = step_summary(row, FROZEN).iloc[0]
    assert summary["fill_source"] == "server log" and summary["log_samples"] == 8
    assert summary["running_logged"] == 256 and summary["fill"] == 1.0
    assert summary["running_mean"] / summary["batch_allowed"] < FILL_THRESHOLD  # what the counters alone would say
    logs = FROZEN / "runs" / "pp-27462" / "logs"
    log = next(logs.glob("8b-pp2-mns256-*T141220+0000.log.gz"))
    samples = running_samples(log)
    assert sorted(n for _, n in samples)[:3] == [0, 1, 244] and len(samples) == 11  # idle and ramp-up lines too
    window = logged_running(logs, str(row["config_id"].iloc[0]), samples[3][0], samples[-1][0])
    assert window == [256] * 6 + [244, 250]


def test_without_log_samples_the_fill_is_the_counters_estimate(pp_rows: pd.DataFrame) -> None:
    row = pp_rows.iloc[[0]].assign(measured_at="2020-01-01T00:00:00+00:00")  # no log covers 2020
    summary = step_summary(row, FROZEN).iloc[0]
    assert summary["log_samples"] == 0 and summary["fill_source"] == "counters"
    assert summary["fill"] == pytest.approx(summary["running_mean"] / summary["batch_allowed"])
