"""What was measured, per case and hardware, summed up from the recorded rows and server logs alone."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from vllm_playbooks import cli
from vllm_playbooks.analysis.runs import (
    HOST_NOT_RECORDED,
    RECORDED_COLUMNS,
    recorded_runs,
    summarize_runs,
)
from vllm_playbooks.book.run_notes import describe_recorded_runs
from vllm_playbooks.results.server_logs import read_server_record, server_record_path
from vllm_playbooks.results.store import cases_with_runs, load_runs
from vllm_playbooks.run import budget
from vllm_playbooks.run.budget import server_time


def _row(pid: str, gpus: int, at: str, host: str | None = None, cards: str = "") -> dict[str, object]:
    return {
        "case": "demo",
        "point_id": pid,
        "repeat": int(pid.rsplit("-r", 1)[1]),
        "gpu_name": "NVIDIA H200",
        "gpu_count": gpus,
        "vllm_version": "0.26.0",
        "host_cpu": host,
        "host_cpu_count": 16 if host else None,
        "measured_at": at,
        "gpu_cards": cards,
    }


def _server(launched: str, gpus: int, minutes: float) -> dict[str, object]:
    return {"launched_at": pd.Timestamp(launched), "gpus": gpus, "gpu_minutes": minutes}


ROWS = pd.DataFrame(
    [
        _row("a-1/in1-out1-c1-r0", 1, "2026-11-30T10:00:00+00:00", cards="GPU-a"),
        _row("a-1/in1-out1-c1-r1", 1, "2026-12-01T23:59:00+00:00", cards="GPU-b"),  # a second run, on another machine
        _row("a-1/in1-out1-c8-r0", 1, "2026-11-30T10:05:00+00:00", cards="GPU-a"),
        _row("b-2/in1-out1-c1-r0", 2, "2026-11-30T12:00:00+00:00", cards="GPU-a + GPU-c"),  # a TP=2 config, same host
        _row("a-1/in1-out1-c4-r0", 1, "2026-12-04T15:00:00+00:00", host="Intel(R) Xeon(R) Processor"),  # not sampled
    ]
)
SERVERS = pd.DataFrame(
    [
        _server("2026-11-30T09:55:00+00:00", 1, 10.0),
        _server("2026-11-30T11:55:00+00:00", 2, 8.0),
        _server("2026-11-30T11:58:00+00:00", 1, 1.5),  # stopped before a point: nearest one-GPU row in time, 10:05
        _server("2026-12-01T23:50:00+00:00", 1, 4.0),
        _server("2026-12-04T14:50:00+00:00", 4, 2.25),  # no row with 4 GPUs: the nearest row of any count
    ]
)


def test_rows_are_summed_up_per_hardware_with_the_gpu_time_of_their_servers() -> None:
    table = summarize_runs(ROWS, SERVERS)
    assert list(table.columns) == RECORDED_COLUMNS
    lines = {(r.gpus_per_server, r.host_cpu): r for r in table.itertuples()}
    assert set(lines) == {(1, HOST_NOT_RECORDED), (2, HOST_NOT_RECORDED), (1, "Intel(R) Xeon(R) Processor, 16 CPUs")}
    one = lines[(1, HOST_NOT_RECORDED)]
    assert (one.rows, one.points, one.repeats, one.gpu_cards) == (3, 2, 1, 2)
    assert (one.first_measured, one.last_measured) == ("2026-11-30", "2026-12-01")
    assert (one.servers, one.gpu_minutes) == (3, 15.5)
    two = lines[(2, HOST_NOT_RECORDED)]
    assert (two.rows, two.points, two.repeats, two.servers, two.gpu_minutes, two.gpu_cards) == (1, 1, 0, 1, 8.0, 2)
    xeon = lines[(1, "Intel(R) Xeon(R) Processor, 16 CPUs")]
    assert (xeon.rows, xeon.servers, xeon.gpu_minutes, xeon.first_measured) == (1, 1, 2.25, "2026-12-04")
    assert xeon.gpu_cards == 0
    assert table["first_measured"].is_monotonic_increasing


def test_nothing_recorded_is_an_empty_table_and_says_so(tmp_path: Path) -> None:
    assert summarize_runs(ROWS.iloc[:0], SERVERS).empty
    assert cases_with_runs(tmp_path) == [] and recorded_runs(data=tmp_path).empty
    assert describe_recorded_runs(recorded_runs(data=tmp_path)) == "No run is recorded yet."


def test_the_sentence_counts_what_the_table_holds() -> None:
    text = describe_recorded_runs(summarize_runs(ROWS, SERVERS))
    assert text.startswith(
        "5 recorded rows (4 distinct points, 1 repeat) of 1 case, measured from 2026-11-30 to "
        "2026-12-04 on NVIDIA H200 with vLLM 0.26.0. The 5 server logs recorded with them show "
        "25.8 GPU-minutes held"
    )


@pytest.mark.recorded_data
def test_the_recorded_cases_add_up_to_their_tables_and_logs() -> None:
    cases = ["pp-27462", "load-desync"]
    table = recorded_runs(cases)
    assert set(cases_with_runs()) >= set(cases) and list(table["case"].unique()) == cases
    for case in cases:
        lines, servers, rows = table[table["case"] == case], server_time(case), load_runs(case)
        assert lines["rows"].sum() == len(rows) and lines["servers"].sum() == len(servers)
        assert lines["gpu_minutes"].sum() == pytest.approx(servers["gpu_minutes"].sum(), abs=0.1)
        # one line per GPU count a row recorded (PP=1 alone on a GPU, PP=2 and TP=2 over two), host named where known
        assert set(lines["gpus_per_server"]) == set(rows["gpu_count"].astype(int))
        assert (lines["host_cpu"] == HOST_NOT_RECORDED).any() == rows["host_cpu"].isna().any()
        assert (lines["gpu_cards"] >= 1).all()  # every line's rows were sampled on at least one card


@pytest.mark.recorded_data
def test_the_runs_command_prints_the_table_and_refuses_an_unknown_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["runs", "load-desync"]) == 0
    out = capsys.readouterr().out
    assert "load-desync" in out and "gpu_minutes" in out and "recorded rows" in out and "pp-27462" not in out
    assert cli.main(["runs", "no-such-case"]) == 2
    assert capsys.readouterr().err.startswith("error: no recorded runs of no-such-case; recorded: ")


def test_a_page_shows_the_reference_gpus_rows_unless_asked_for_another_or_all() -> None:
    from vllm_playbooks.analysis.runs import rows_on_hardware, with_hardware_series
    from vllm_playbooks.errors import ConfigError
    from vllm_playbooks.hardware import REFERENCE_GPU

    rows = pd.DataFrame({"engine_label": ["a", "a", "b"], "gpu_name": [REFERENCE_GPU, "NVIDIA L40S", "NVIDIA L40S"]})
    assert rows_on_hardware(rows)["gpu_name"].tolist() == [REFERENCE_GPU]
    assert rows_on_hardware(rows, "NVIDIA L40S")["engine_label"].tolist() == ["a", "b"]
    assert len(rows_on_hardware(rows, "all")) == len(rows_on_hardware(rows, mode="live")) == 3
    with pytest.raises(
        ConfigError,
        match=r"^no rows recorded on hardware 'NVIDIA A100'; recorded: NVIDIA H200, "
        r"NVIDIA L40S \(or 'all'",
    ):
        rows_on_hardware(rows, "NVIDIA A100")
    assert with_hardware_series(rows)["series"].tolist() == ["a on NVIDIA H200", "a on NVIDIA L40S", "b on NVIDIA L40S"]
    assert with_hardware_series(rows.iloc[1:])["series"].tolist() == ["a", "b"]  # one GPU: the labels alone


def test_disturbed_runs_are_marked_and_counted_per_hardware() -> None:
    import pandas as pd

    from vllm_playbooks.analysis.runs import mark_disturbed, summarize_runs

    rows = pd.DataFrame(
        {
            "case": "c",
            "gpu_name": ["H100", "H100", "H100", "H200"],
            "gpu_count": 1,
            "vllm_version": "0.26.0",
            "host_cpu": "Xeon",
            "host_cpu_count": 16,
            "gpu_cards": "",
            "repeat": 0,
            "point_id": ["h/a/c1-r0", "h/a/c4-r0", "h/a/c16-r0", "g/a/c1-r0"],
            "measured_at": "2026-12-07T00:00:00+00:00",
            "host_steal_pct": [0.1, 3.0, None, 0.0],
            "host_load_1m_max": [2.0, 2.0, 20.0, None],
            # the H100's clock is held against the H100's best (1980), the H200's against its own
            "gpu_sm_clock_mhz_mean": [1980.0, 1970.0, 1700.0, 1500.0],
        }
    )
    marked = mark_disturbed(rows)
    assert list(marked["disturbed"]) == ["", "CPU steal", "host load, GPU clock", ""]
    table = summarize_runs(marked, pd.DataFrame(columns=["launched_at", "gpu_minutes", "gpus"]))
    assert dict(zip(table["gpu_name"], table["disturbed"], strict=True)) == {"H100": 2, "H200": 0}


def test_a_server_whose_log_names_its_hardware_counts_there_and_one_on_no_rows_hardware_gets_a_line() -> None:
    h200, h100 = "nvidia-h200-x1-vllm0.26.0", "nvidia-h100-80gb-hbm3-x1-vllm0.26.0"
    rows = ROWS.assign(hardware=[h200, h200, h200, "nvidia-h200-x2-vllm0.26.0", h200])
    servers = pd.DataFrame(
        [
            # nearest in time to the 2-GPU row (12:00), but its record names the one-GPU H200
            {**_server("2026-11-30T11:59:00+00:00", 2, 3.0), "hardware": h200, "gpu_name": "NVIDIA H200"},
            # an H100 start-up stopped before its first point: no H100 row in the case
            {**_server("2026-12-07T10:41:34+00:00", 1, 9.3), "hardware": h100, "gpu_name": "NVIDIA H100 80GB HBM3"},
        ]
    ).assign(vllm_version="0.26.0")
    assert budget.server_values(rows, servers, "gpu_name") == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    lines = {(r.gpu_name, r.gpus_per_server, r.host_cpu): r for r in summarize_runs(rows, servers).itertuples()}
    assert lines[("NVIDIA H200", 1, HOST_NOT_RECORDED)].servers == 1
    assert lines[("NVIDIA H200", 2, HOST_NOT_RECORDED)].servers == 0
    h100_line = lines[("NVIDIA H100 80GB HBM3", 1, HOST_NOT_RECORDED)]
    assert (h100_line.rows, h100_line.servers, h100_line.gpu_minutes, h100_line.first_measured) == (
        0,
        1,
        9.3,
        "2026-12-07",
    )


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"hardware": 3}'])
def test_a_missing_or_damaged_server_record_reads_as_none(tmp_path: Path, text: str) -> None:
    log = tmp_path / "spec-off-abc-2026-12-07T104134+0000.log.gz"
    if text:
        server_record_path(log).write_text(text)
    assert read_server_record(log) == {}
