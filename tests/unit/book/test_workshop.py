"""Workshop exercises: every expected answer against an independent computation, and the checker's verdicts."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import math
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from tests.conftest import ROOT
from vllm_playbooks.book import engine_exercises, exercises, workshop
from vllm_playbooks.book.notebooks import check_notebook, default_parameters
from vllm_playbooks.book.tables import SHOWN_ROWS
from vllm_playbooks.book.workshop import WrongAnswer
from vllm_playbooks.config import capacity
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import REFERENCE_GPU
from vllm_playbooks.paths import data_dir

CASES = ROOT / "vllm_playbooks" / "cases"
LLAMA, D13834, PP = "llama-8b-draft-model", "discussion-13834", "pp-27462"


def _runs_csv(case: str) -> pd.DataFrame:
    """The reference GPU's rows of the recorded table, read as plain CSV (not through the replay machinery the
    solutions use, which answer for that GPU too), with the rows other cases' tables hold of the same points (the
    same hardware, config id and load: the point id without its ``-r<repeat>``), as the pages count them."""
    tables = {path.parent.name: pd.read_csv(path) for path in sorted((data_dir() / "runs").glob("*/runs.csv"))}
    own = tables[case]
    points = set(own.point_id.str.rsplit("-r", n=1).str[0])
    same = [t[t.point_id.str.rsplit("-r", n=1).str[0].isin(points)] for name, t in tables.items() if name != case]
    rows = pd.concat([own, *same], ignore_index=True)
    return rows[rows.gpu_name == REFERENCE_GPU]


def _stop_paying_by_hand(metric: str, higher_is_better: bool) -> tuple[int | str, list[int]]:
    """The last level at which the speculative rows beat speculation off beyond the band, or "never", and the levels
    both sides ran at. Each side is the median of its runs; the band is the wider side's spread, (highest - lowest) /
    median, and at least 5 % (one run each: 5 %)."""
    rows = _runs_csv("llama-8b-draft-model")
    sides = {
        method: rows[rows.spec_method == method].groupby("concurrency")[metric] for method in ("none", "draft_model")
    }
    medians = {method: side.median() for method, side in sides.items()}
    spreads = {method: 100 * (side.max() - side.min()) / side.median() for method, side in sides.items()}
    levels = sorted(int(c) for c in set(medians["none"].index) & set(medians["draft_model"].index))
    wins = []
    for c in levels:
        band = max(5.0, spreads["none"][c], spreads["draft_model"][c])
        ratio = medians["draft_model"][c] / medians["none"][c]
        if (ratio if higher_is_better else 1 / ratio) > 1 + band / 100:
            wins.append(c)
    return (max(wins) if wins else exercises.NEVER), levels


def _chunks_by_hand(concurrency: int) -> tuple[float, float]:
    """Mean ITL over mean acceptance length of the speculative runs at ``concurrency``, and its ratio to their mean
    TPOT (repeats averaged)."""
    rows = _runs_csv("llama-8b-draft-model")
    spec = rows[(rows.spec_method != "none") & (rows.concurrency == concurrency)]
    assert not spec.empty, f"no speculative row at concurrency {concurrency}"
    per_token = float(spec.itl_mean_ms.mean() / spec.mean_acceptance_length.mean())
    return per_token, per_token / float(spec.tpot_mean_ms.mean())


def _published(case: str, claim_id: str) -> float:
    with (CASES / case.replace("-", "_") / "published.csv").open(newline="", encoding="utf-8") as handle:
        values = [float(r["value"]) for r in csv.DictReader(handle) if r["claim_id"] == claim_id]
    assert len(values) == 1
    return values[0]


# --------------------------------------------------------------------------------------------------------------
# The expected answers
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.recorded_data
@pytest.mark.parametrize(("metric", "higher_is_better"), [("output_tok_s", True), ("tpot_p50_ms", False)])
def test_stop_paying_matches_a_plain_pairing_of_the_rows(metric: str, higher_is_better: bool) -> None:
    expected, levels = _stop_paying_by_hand(metric, higher_is_better)
    assert levels, "the case has no paired levels"
    solution = exercises.stop_paying_solution(LLAMA, metrics=[metric])
    assert solution.value == {metric: expected}
    assert sorted(solution.table["concurrency"]) == levels


def test_stop_paying_finds_the_last_winning_level(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = []
    for label, method, tok_s, tpot in (
        ("off", "none", [100, 400, 900], [10.0, 12.0, 20.0]),
        ("spec", "draft_model", [150, 432, 800], [8.0, 13.0, 25.0]),
    ):
        for c, t, p in zip([1, 4, 16], tok_s, tpot, strict=True):
            rows.append(
                dict(
                    engine_label=label,
                    spec_method=method,
                    num_speculative_tokens=0 if method == "none" else 4,
                    imposed_alpha=None,
                    concurrency=c,
                    request_rate_qps=None,
                    output_tok_s=float(t),
                    tpot_p50_ms=p,
                    model_shape="s",
                    load_format="dummy",
                    input_len=8,
                    output_len=8,
                    tensor_parallel_size=1,
                    pipeline_parallel_size=1,
                    max_num_seqs=None,
                    max_num_batched_tokens=None,
                    gpu_name="g",
                )
            )
    monkeypatch.setattr("vllm_playbooks.book.exercises.results_for", lambda case, mode: pd.DataFrame(rows))
    solution = exercises.stop_paying_solution(case="synthetic")
    # throughput: +50 % at 1, +8 % at 4, -11 % at 16; TPOT: better at 1 only (each beyond the 5 % band)
    assert solution.value == {"output_tok_s": 4, "tpot_p50_ms": 1}
    assert workshop.check("stop-paying", {"output_tok_s": 4, "tpot_p50_ms": 1}, solution).startswith("correct: ")
    with pytest.raises(WrongAnswer) as wrong:
        workshop.check("stop-paying", {"output_tok_s": 16, "tpot_p50_ms": 1}, solution, hint="same concurrency")
    assert str(wrong.value) == "not yet: output_tok_s does not match — same concurrency"  # never the expected 4


@pytest.mark.recorded_data
def test_chunks_estimate_is_mean_itl_over_mean_acceptance_length() -> None:
    expected, over_tpot = _chunks_by_hand(16)
    solution = exercises.chunks_solution(LLAMA, concurrency=16)
    assert solution.value == pytest.approx(expected, rel=1e-12)
    table = solution.table.set_index("concurrency")
    assert table.loc[16, "per_token_over_tpot"] == pytest.approx(over_tpot)


@pytest.mark.recorded_data
def test_chunks_refuses_an_unmeasured_level() -> None:
    rows = _runs_csv("llama-8b-draft-model")
    spec = rows[(rows.spec_method != "none") & rows.mean_acceptance_length.notna()]
    levels = sorted({int(c) for c in spec.concurrency})
    missing = next(c for c in range(2, 1000) if c not in levels)
    measured = ", ".join(map(str, levels))
    with pytest.raises(ConfigError, match=rf"no row at concurrency {missing}; measured: {measured}$"):
        exercises.chunks_solution(LLAMA, concurrency=missing)


@pytest.mark.recorded_data  # the worked explanation reads the recorded acceptance
def test_tokens_per_step_from_the_reported_acceptance() -> None:
    alpha = _published("discussion-13834", "acceptance-rate-author-quoted")
    k = int(_published("discussion-13834", "num-speculative-tokens"))
    assert (alpha, k) == (0.72, 5)
    tau = sum(alpha**i for i in range(k + 1))  # 1 + α + … + α^k
    assert tau == pytest.approx(3.0738783232, abs=1e-10)  # by hand: 1 + .72 + .5184 + .373248 + .26873856 + .19349176
    solution = exercises.tokens_per_step_solution(D13834)
    assert solution.value["tokens_per_step"] == pytest.approx(tau)
    assert solution.value["break_even_c"] == pytest.approx((tau - 1) / k)
    assert solution.value["break_even_c"] == pytest.approx(0.41477566464, abs=1e-10)
    # at the break-even cost, S = τ / (k·c + 1) is exactly 1
    assert tau / (k * solution.value["break_even_c"] + 1) == pytest.approx(1.0)


@pytest.mark.recorded_data  # the worked explanation reads the recorded acceptance
def test_with_one_draft_token_break_even_is_alpha() -> None:
    solution = exercises.tokens_per_step_solution(D13834, alpha=0.6, k=1)  # book: with k = 1, S > 1 iff α > c
    assert solution.value == pytest.approx({"tokens_per_step": 1.6, "break_even_c": 0.6})


@pytest.mark.recorded_data
def test_littles_law_from_the_reported_numbers() -> None:
    streams = _published("discussion-13834", "output-tok-s-spec-off") * _published(
        "discussion-13834", "itl-ms-spec-off"
    )
    streams /= 1000.0
    assert streams == pytest.approx(31.9451925)  # 95.43 tok/s × 0.33475 s
    solution = exercises.littles_law_solution(D13834)
    assert solution.value == pytest.approx(streams)
    # on our own rows the request form of the law gives back the concurrency the load generator held
    table = solution.table
    assert (table.requests_in_flight / table.concurrency).between(0.95, 1.01).all()
    assert (table.streams_decoding <= table.requests_in_flight).all()


def test_max_num_seqs_is_the_kv_cache_over_the_sequence_length() -> None:
    solution = engine_exercises.max_num_seqs_solution()
    engine = EngineConfig(label="t", model="llama-3.3-70b-awq", kv_cache_dtype="fp8", max_model_len=8192)
    budget = capacity.kv_budget(engine, 80.0, "A100 80GB")
    assert budget.kv_bytes_per_token == 2 * 80 * 8 * 128 * 1  # 80 layers, 8 KV heads of 128, fp8
    assert budget.requested_bytes == round(0.9 * 80 * 1024**3)
    n = math.floor(budget.kv_tokens / 8192)
    assert solution.value == {"max_num_seqs": n, "binding": "memory"}
    assert budget.max_num_seqs == 256  # an A100 keeps vLLM's smaller defaults, and 256 > n: memory binds
    assert n < 256
    at_n = capacity.kv_budget(engine.model_copy(update={"max_num_seqs": n}), 80.0, "A100 80GB")
    above = capacity.kv_budget(engine.model_copy(update={"max_num_seqs": n + 1}), 80.0, "A100 80GB")
    assert (at_n.binding, above.binding) == ("max_num_seqs", "memory")


def test_a_draft_model_costs_sequences() -> None:
    alone = engine_exercises.max_num_seqs_solution().value["max_num_seqs"]
    with_draft = engine_exercises.max_num_seqs_solution(draft_model="llama-3.2-3b-awq", num_speculative_tokens=5)
    assert with_draft.value["max_num_seqs"] < alone


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (3, 512 // 4),  # min(256 × 4 × 2, 512, 8192) = 512 tokens, 4 tokens per sequence
        (4, 500 // 5),  # sizes rounded up to multiples of 5 that stay ≤ 512: 496 → 500 is the largest
        (1, 256),  # 512 tokens / 2 = 256 sequences: every batch up to max_num_seqs is graphed
    ],
)
def test_cuda_graph_decode_batch_by_hand(k: int, expected: int) -> None:
    assert engine_exercises.cuda_graphs_solution(num_speculative_tokens=k, max_num_seqs=256).value == expected


def test_cuda_graph_statement_says_which_batches_run_without_a_graph() -> None:
    solution = engine_exercises.cuda_graphs_solution()
    assert "decode batches of 129 to 256 sequences run without a full CUDA graph" in solution.statement
    assert "every decode batch up to max_num_seqs=256 is graphed" in engine_exercises.cuda_graphs_solution(1).statement


# --------------------------------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def solutions() -> dict[str, exercises.Solution]:
    # each exercise solved for the case its notebook's parameters name (those without a case take none)
    return {eid: exercise.solve(**_case_of(exercise)) for eid, exercise in workshop.EXERCISES.items()}


def _case_of(exercise: workshop.Exercise) -> dict[str, str]:
    params = default_parameters(ROOT / "notebooks" / exercise.notebook)
    return {"case": params["case"]} if "case" in params else {}


@pytest.mark.recorded_data
def test_worked_solutions_check_out(solutions: dict[str, exercises.Solution]) -> None:
    for eid, solution in solutions.items():
        line = workshop.check(eid, None, solution)
        assert line == "no answer yet: set `answer` in the parameters cell (the worked solution agrees with the data)"
        assert workshop.check(eid, None, solution) == line  # deterministic


@pytest.mark.recorded_data
@pytest.mark.parametrize(
    ("eid", "right", "wrong", "message"),
    [
        (
            "tokens-per-step",
            {"tokens_per_step": 3.07, "break_even_c": 0.41},
            {"tokens_per_step": 3.07, "break_even_c": 0.72},
            "not yet: break_even_c does not match",
        ),
        ("littles-law", 32, 95.43, "not yet: the answer does not match"),
        (
            "size-max-num-seqs",
            {"max_num_seqs": 27, "binding": "Memory"},
            {"max_num_seqs": 256, "binding": "memory"},
            "not yet: max_num_seqs does not match",
        ),
        ("cuda-graph-sizes", 128, 512, "not yet: the answer does not match"),
    ],
)
def test_check_accepts_the_right_answer_and_names_what_is_wrong(
    solutions: dict[str, exercises.Solution], eid: str, right: object, wrong: object, message: str
) -> None:
    # the right answers here are what the worked solutions compute (independently checked above) from the published
    # numbers and the shapes; the exercises on the recorded rows follow
    assert workshop.check(eid, right, solutions[eid]) == f"correct: {solutions[eid].statement}"
    with pytest.raises(WrongAnswer) as raised:
        workshop.check(eid, wrong, solutions[eid], hint="a hint")
    assert str(raised.value) == f"{message} — a hint"
    with pytest.raises(WrongAnswer, match=f"^{message}$"):
        workshop.check(eid, wrong, solutions[eid])


@pytest.mark.recorded_data
def test_check_grades_the_answers_from_the_recorded_rows(solutions: dict[str, exercises.Solution]) -> None:
    """The right answers worked out by hand from the recorded table, as a learner writes them ("never" or None for
    no level, a float rounded to two places), and a wrong level or number named against the expected one."""
    off_by_hand, levels = _stop_paying_by_hand("output_tok_s", True)
    tpot_by_hand, _ = _stop_paying_by_hand("tpot_p50_ms", False)
    right = {"output_tok_s": off_by_hand, "tpot_p50_ms": None if tpot_by_hand == exercises.NEVER else tpot_by_hand}
    assert workshop.check("stop-paying", right, solutions["stop-paying"]).startswith("correct: ")
    wrong_level = levels[-1] if off_by_hand == exercises.NEVER else exercises.NEVER
    shown = {level: f'"{level}"' if level == exercises.NEVER else str(level) for level in (off_by_hand, wrong_level)}
    with pytest.raises(WrongAnswer, match="^not yet: output_tok_s does not match$") as raised:
        workshop.check("stop-paying", {**right, "output_tok_s": wrong_level}, solutions["stop-paying"])
    assert shown[off_by_hand] not in str(raised.value)
    per_token, _ = _chunks_by_hand(16)
    chunks = solutions["chunks-not-tokens"]
    assert workshop.check("chunks-not-tokens", round(per_token, 2), chunks).startswith("correct: ")
    with pytest.raises(WrongAnswer, match="^not yet: the answer does not match$"):
        workshop.check("chunks-not-tokens", per_token * 3, chunks)


@pytest.mark.recorded_data
def test_floats_pass_within_one_percent(solutions: dict[str, exercises.Solution]) -> None:
    exact = solutions["littles-law"].value
    assert workshop.check("littles-law", exact * 1.009, solutions["littles-law"]).startswith("correct")
    for wrong in (exact * 1.02, True):  # a bool is no number
        with pytest.raises(WrongAnswer, match="^not yet: "):
            workshop.check("littles-law", wrong, solutions["littles-law"])


@pytest.mark.recorded_data
def test_answers_given_as_text_are_read(solutions: dict[str, exercises.Solution]) -> None:
    """papermill -p passes a dict as a string; it is read as YAML."""
    text = '{"max_num_seqs": 27, "binding": "memory"}'
    assert workshop.check("size-max-num-seqs", text, solutions["size-max-num-seqs"]).startswith("correct")
    assert workshop.check("cuda-graph-sizes", "128", solutions["cuda-graph-sizes"]).startswith("correct")


@pytest.mark.recorded_data
def test_malformed_answers_get_a_clear_line(solutions: dict[str, exercises.Solution]) -> None:
    with pytest.raises(
        WrongAnswer, match="^not yet: expected a dict with keys tokens_per_step, break_even_c, got 3.07$"
    ):
        workshop.check("tokens-per-step", 3.07, solutions["tokens-per-step"])
    with pytest.raises(WrongAnswer, match="^not yet: expected the keys tokens_per_step, break_even_c, got tau$"):
        workshop.check("tokens-per-step", {"tau": 3.07}, solutions["tokens-per-step"])


@pytest.mark.recorded_data
def test_unknown_exercise_is_refused(solutions: dict[str, exercises.Solution]) -> None:
    with pytest.raises(ConfigError, match=r"unknown exercise 'little-law'; known: stop-paying, chunks-not-tokens"):
        workshop.check("little-law", 32, solutions["littles-law"])


@pytest.mark.recorded_data
def test_a_solution_of_another_exercise_is_refused(solutions: dict[str, exercises.Solution]) -> None:
    with pytest.raises(ConfigError, match=r"needs the solution of exercise 'littles-law', got 'cuda-graph-sizes'"):
        workshop.check("littles-law", 32, solutions["cuda-graph-sizes"])
    with pytest.raises(ConfigError, match="got 'NoneType'"):
        workshop.check("littles-law", 32, None)  # type: ignore[arg-type]


@pytest.mark.recorded_data
def test_an_edited_solution_is_caught(solutions: dict[str, exercises.Solution]) -> None:
    edited = dataclasses.replace(solutions["cuda-graph-sizes"], value=256)
    with pytest.raises(ConfigError, match="workshop_6_cuda_graphs.ipynb: the worked solution disagrees with the data"):
        workshop.check("cuda-graph-sizes", None, edited)


@pytest.mark.recorded_data
def test_rows_of_several_gpus_answer_for_the_reference_or_need_a_gpu_name(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _runs_csv("llama-8b-draft-model")
    reference = rows[rows["gpu_name"] == REFERENCE_GPU]
    # Another GPU on which the speculative config wins by 10x at every load: its answer differs from the reference's.
    speculative = reference["spec_method"] != "none"
    other = reference.assign(gpu_name="Other GPU")
    other.loc[speculative, "output_tok_s"] *= 10
    other.loc[speculative, "tpot_p50_ms"] /= 10
    mixed = pd.concat([reference, other])
    monkeypatch.setattr("vllm_playbooks.book.exercises.results_for", lambda case, mode: reference)
    reference_answer = exercises.stop_paying_solution(LLAMA).value
    monkeypatch.setattr("vllm_playbooks.book.exercises.results_for", lambda case, mode: mixed)
    assert exercises.stop_paying_solution(LLAMA).value == reference_answer
    assert exercises.case_rows("llama-8b-draft-model").equals(reference)
    top = int(reference["concurrency"].max())
    assert exercises.stop_paying_solution(LLAMA, gpu_name="Other GPU").value == {
        "output_tok_s": top,
        "tpot_p50_ms": top,
    }
    assert reference_answer != {"output_tok_s": top, "tpot_p50_ms": top}
    with pytest.raises(ConfigError, match="no rows measured on 'A100'"):
        exercises.stop_paying_solution(LLAMA, gpu_name="A100")

    without_reference = pd.concat([other, other.assign(gpu_name="Third GPU")])
    monkeypatch.setattr("vllm_playbooks.book.exercises.results_for", lambda case, mode: without_reference)
    with pytest.raises(ConfigError, match=r"rows from several GPUs \['Other GPU', 'Third GPU'\]; set gpu_name"):
        exercises.stop_paying_solution(LLAMA)
    assert exercises.stop_paying_solution(LLAMA, gpu_name="Third GPU").value.keys() == {"output_tok_s", "tpot_p50_ms"}


# --------------------------------------------------------------------------------------------------------------
# The notebooks
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exercise", list(workshop.EXERCISES.values()), ids=list(workshop.EXERCISES))
def test_each_exercise_has_its_notebook(exercise: workshop.Exercise) -> None:
    path = ROOT / "notebooks" / exercise.notebook
    assert check_notebook(path) == []
    params = default_parameters(path)
    assert params["mode"] == "replay" and params["answer"] is None
    nb = nbformat.read(path, as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert params["show_solution"] is False  # a learner's run shows no worked solution before the answer passed
    solve = next(i for i, t in enumerate(tags) if "hide-input" in t)
    assert f"exercises.{exercise.solve.__name__}(" in nb.cells[solve].source
    checks = [c for c, t in zip(nb.cells, tags, strict=True) if "nbval-check-output" in t]
    assert len(checks) == 1 and nb.cells[solve + 1] is checks[0]  # the check runs before anything shows the solution
    heading, show = nb.cells[solve + 2], nb.cells[solve + 3]
    assert heading.cell_type == "markdown" and "Solution (open after trying)" in heading.source
    assert show.source.startswith(f'if workshop.solution_shown("{exercise.id}", answer, solution, show_solution):')
    assert all("solution." not in c.source for c in nb.cells[:solve] if c.cell_type == "code")
    hint, call = checks[0].source.split("\n")
    assert hint.startswith('hint = "') and len(hint) > 40  # a hint written in the page
    assert call == f'print(workshop.check("{exercise.id}", answer, solution, hint=hint))'
    assert checks[0].outputs and checks[0].outputs[0]["text"].startswith("no answer yet: ")
    solution_cells = [t for t in tags if "hide-cell" in t or "hide-input" in t]
    assert len(solution_cells) == 2  # the worked solution stays collapsed
    assert nb.cells[0].source.startswith(f"# Workshop {exercise.number}: ")


def _prom_value(text: str, name: str) -> float:
    """Sum of a sample's values over its label sets, read from Prometheus text with a plain pattern."""
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, flags=re.M))


def test_microbatches_from_the_raw_scrapes_by_hand(frozen_data: Path) -> None:
    """Output tokens / engine steps of the PP=2, cap-64 point, read with a regex from its two scrapes (the frozen
    copy of the recorded #27462 runs)."""
    point = next((frozen_data / "runs" / "pp-27462" / "raw").glob("*/8b-pp2-mns64-*/*"))
    before, after = (
        gzip.decompress((point / f"metrics_{w}.prom.gz").read_bytes()).decode() for w in ("before", "after")
    )
    steps = _prom_value(after, "vllm:iteration_tokens_total_count") - _prom_value(
        before, "vllm:iteration_tokens_total_count"
    )
    tokens = _prom_value(after, "vllm:generation_tokens_total") - _prom_value(before, "vllm:generation_tokens_total")
    solution = engine_exercises.microbatches_solution(PP)
    assert solution.value["sequences_per_step"] == pytest.approx(tokens / steps)
    assert solution.value["running"] == pytest.approx(2 * tokens / steps)
    assert 0.95 * 64 < solution.value["running"] <= 64  # the cap, shared by the two microbatches
    assert set(solution.table.engine_label) == {"8b-pp1-mns64", "8b-pp2-mns64", "8b-tp2-mns64"}
    with pytest.raises(ConfigError, match="no recorded config 'nope'"):
        engine_exercises.microbatches_solution(PP, engine_label="nope")


@pytest.mark.slow
@pytest.mark.recorded_data
def test_papermill_exits_non_zero_on_a_wrong_answer_and_zero_on_a_right_one(tmp_path: Path) -> None:
    """What a workshop host's grading loop relies on: the notebook run as papermill runs it from the shell."""
    import subprocess
    import sys

    source = ROOT / "notebooks" / workshop.EXERCISES["cuda-graph-sizes"].notebook
    right = workshop.EXERCISES["cuda-graph-sizes"].solve().value

    def run(answer: object) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable,
            "-m",
            "papermill",
            str(source),
            str(tmp_path / "out.ipynb"),
            "-p",
            "answer",
            str(answer),
            "--cwd",
            str(source.parent),
            "-k",
            "python3",
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)

    wrong = run(right * 4)
    assert (
        wrong.returncode != 0 and "WrongAnswer" in wrong.stderr and "not yet: the answer does not match" in wrong.stderr
    )
    assert f"{right}" not in re.sub(r"\x1b\[[0-9;]*m", "", wrong.stderr).split("not yet:")[1]
    passed = run(right)
    assert passed.returncode == 0, passed.stderr


def test_a_given_table_shows_its_first_rows_and_folds_the_rest_with_exact_cells() -> None:
    frame = pd.DataFrame({"concurrency": range(1, SHOWN_ROWS + 6), "acceptance": [0.72] * (SHOWN_ROWS + 5)})
    html = workshop.given(frame)._repr_html_()
    shown, folded = html.split("<details>")
    assert shown.count("<tr") == SHOWN_ROWS + 1 and folded.count("<tr") == SHOWN_ROWS + 6  # with the header row
    assert ">0.72<" in shown and f"All {SHOWN_ROWS + 5} rows" in folded
    assert "<details>" not in workshop.given(frame.head(3))._repr_html_()
