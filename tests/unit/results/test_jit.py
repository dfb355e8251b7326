"""Kernel JIT compilations during inference, read from server logs and placed in the measured runs' windows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from tests.conftest import FROZEN
from vllm_playbooks.book.page_notes import jit_note
from vllm_playbooks.results.jit import OUTSIDE, JitEvent, jit_table, parse_jit_events
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.results.stalls import describe_load, mark_stalled

UTC = dt.UTC
TAIL = "This causes a latency spike; consider extending warmup to cover this shape/config."


def jit_line(process: str, stamp: str, message: str) -> str:
    """A line of vLLM's JIT monitor, as a server log holds it."""
    return f"({process}) WARNING {stamp} [jit_monitor.py:135] {message}. {TAIL}"


def test_the_jit_monitor_lines_are_parsed_and_nothing_else() -> None:
    text = "\n".join(
        [
            "(EngineCore pid=7) INFO 11-30 15:44:37 [jit_monitor.py:79] Kernel JIT monitor activated; monitored JIT "
            "compilations during inference will use mode=warn.",
            jit_line(
                "EngineCore pid=7",
                "11-30 15:45:00",
                "Triton kernel JIT compilation during inference: define_kernel.<locals>._empty_fn",
            ),
            "(APIServer pid=5) WARNING 11-30 15:45:30 [serving.py:10] something else during inference: x. " + TAIL,
            jit_line("Worker_TP1 pid=9", "11-30 15:46:01", "CuTeDSL JIT compilation during inference: gemm"),
            jit_line(
                "EngineCore pid=7",
                "11-30 15:46:38",
                "Triton kernel JIT compilation during inference: "
                "fused_moe_kernel (constexprs={BLOCK_SIZE_M=16}; signature={a='*bf16'}; key='k. x')",
            ),
        ]
    )
    started = dt.datetime(2026, 11, 30, 15, 37, 9, tzinfo=UTC)
    assert parse_jit_events(text, started) == [
        JitEvent(
            dt.datetime(2026, 11, 30, 15, 45, 0, tzinfo=UTC),
            "EngineCore pid=7",
            "Triton",
            "define_kernel.<locals>._empty_fn",
        ),
        JitEvent(dt.datetime(2026, 11, 30, 15, 46, 1, tzinfo=UTC), "Worker_TP1 pid=9", "CuTeDSL", "gemm"),
        JitEvent(dt.datetime(2026, 11, 30, 15, 46, 38, tzinfo=UTC), "EngineCore pid=7", "Triton", "fused_moe_kernel"),
    ]
    # the year comes from the log's start; a line dated before it is in the next year
    new_year = jit_line("EngineCore pid=7", "01-01 00:05:00", "TileLang JIT compilation during inference: k")
    (event,) = parse_jit_events(new_year, dt.datetime(2026, 12, 31, 23, 50, tzinfo=UTC))
    assert (event.at, event.backend) == (dt.datetime(2027, 1, 1, 0, 5, tzinfo=UTC), "TileLang")


def row(
    config_id: str,
    load: str,
    measured_at: str,
    duration_s: float,
    stalled: bool,
    rate: float | None = None,
    concurrency: float | None = None,
) -> dict[str, object]:
    """A measured row with the columns ``jit_table`` reads."""
    return dict(
        case="demo",
        point_id=f"{config_id}/{load}-r0",
        config_id=config_id,
        engine_label=config_id.rsplit("-", 1)[0],
        request_rate_qps=rate,
        concurrency=concurrency,
        duration_s=duration_s,
        measured_at=measured_at,
        stalled=stalled,
    )


def test_events_are_placed_in_the_run_of_their_own_server_that_holds_them(tmp_path: Path) -> None:
    logs = tmp_path / "runs" / "demo" / "logs"
    logs.mkdir(parents=True)
    kernel = "Triton kernel JIT compilation during inference: "
    (logs / "mtp-0123456789-2026-11-30T100000+0000.log").write_text(
        "\n".join(
            [
                jit_line("EngineCore pid=1", "11-30 10:04:00", kernel + "warmup_kernel"),  # before the first run
                jit_line(
                    "EngineCore pid=1", "11-30 10:05:30", kernel + "fused_moe_kernel"
                ),  # inside qps4 (10:05-10:06)
                jit_line("EngineCore pid=1", "11-30 10:06:30", kernel + "between_kernel"),  # between the runs
                jit_line("EngineCore pid=1", "11-30 10:08:00", kernel + "last_second_kernel"),  # at c8's measured_at
            ]
        )
    )
    # a later lifetime of the same server, and the other server, whose compile falls in the MTP server's run
    (logs / "mtp-0123456789-2026-11-30T110000+0000.log").write_text(
        jit_line("EngineCore pid=2", "11-30 11:00:10", kernel + "restart_kernel")
    )
    (logs / "off-abcdefabcd-2026-11-30T100000+0000.log").write_text(
        jit_line("EngineCore pid=3", "11-30 10:05:40", kernel + "fused_moe_kernel")
    )
    # neither a bench log nor the log of a config without rows is read
    (logs / "mtp-0123456789-2026-11-30T100000+0000.bench.log").write_text(
        jit_line("EngineCore pid=1", "11-30 10:05:31", kernel + "bench_kernel")
    )
    (logs / "other-ffffffffff-2026-11-30T100000+0000.log").write_text(
        jit_line("EngineCore pid=4", "11-30 10:05:32", kernel + "other_kernel")
    )
    runs = pd.DataFrame(
        [
            row("mtp-0123456789", "qps4", "2026-11-30T10:06:00+00:00", 60.0, True, rate=4.0),
            row("mtp-0123456789", "c8", "2026-11-30T10:08:00+00:00", 60.0, False, concurrency=8.0),
            row("off-abcdefabcd", "qps4", "2026-11-30T10:10:00+00:00", 60.0, True, rate=4.0),
        ]
    )
    table = jit_table(runs, tmp_path)
    assert table.kernel.tolist() == [
        "warmup_kernel",
        "fused_moe_kernel",
        "fused_moe_kernel",
        "between_kernel",
        "last_second_kernel",
        "restart_kernel",
    ]
    assert table.engine_label.tolist() == ["mtp", "mtp", "off", "mtp", "mtp", "mtp"]
    assert table.point_id.fillna("").tolist() == ["", "mtp-0123456789/qps4-r0", "", "", "mtp-0123456789/c8-r0", ""]
    assert table.load.tolist() == [OUTSIDE, "4 QPS", OUTSIDE, OUTSIDE, "concurrency 8", OUTSIDE]
    assert table.stalled.tolist() == [None, True, None, None, False, None]
    assert table.log.iloc[-1] == "mtp-0123456789-2026-11-30T110000+0000.log"
    assert set(table.process) == {"EngineCore pid=1", "EngineCore pid=2", "EngineCore pid=3"}
    assert (table.backend == "Triton").all()
    assert table["at"].iloc[1] == pd.Timestamp("2026-11-30T10:05:30Z")

    note = jit_note(table)
    assert note.startswith(
        "**Kernel compilations.** vLLM logged 6 kernel JIT compilations during inference, "
        "2 inside measured runs: mtp at 4 QPS (`fused_moe_kernel` at 10:05:30 UTC; the run "
        "stalled); mtp at concurrency 8 (`last_second_kernel` at 10:08:00 UTC; the run did not "
        "stall). The other 4 came outside the recorded runs (warm-up, calibration, a run measured "
        "again, or between points)."
    )
    assert "only the first compilation of each kernel name per server process" in note
    assert "invisible in these logs" in note


def test_the_note_says_when_no_compilation_fell_in_a_run_and_is_empty_without_any(tmp_path: Path) -> None:
    logs = tmp_path / "runs" / "demo" / "logs"
    logs.mkdir(parents=True)
    (logs / "mtp-0123456789-2026-11-30T100000+0000.log").write_text(
        jit_line("EngineCore pid=1", "11-30 10:04:00", "Triton kernel JIT compilation during inference: k")
    )
    runs = pd.DataFrame([row("mtp-0123456789", "qps4", "2026-11-30T10:06:00+00:00", 60.0, True, rate=4.0)])
    note = jit_note(jit_table(runs, tmp_path))
    assert note.startswith(
        "**Kernel compilations.** vLLM logged 1 kernel JIT compilation during inference, none inside a measured run"
    )
    assert "only the first compilation" in note
    (logs / "mtp-0123456789-2026-11-30T100000+0000.log").write_text("no compilations\n")
    empty = jit_table(runs, tmp_path)
    assert empty.empty and jit_note(empty) == ""


def test_a_load_is_its_rate_else_its_concurrency() -> None:
    assert describe_load(4.0, float("nan")) == "4 QPS"
    assert describe_load(float("nan"), 64.0) == "concurrency 64"
    assert describe_load(None, 16) == "concurrency 16"


def test_the_recorded_moe_compile_fell_in_the_stalled_mtp_run_at_4_qps() -> None:
    """DeepSeek's first session (frozen: the two servers of 2026-11-30 15:37 and some of their points)."""
    runs = mark_stalled(replay_case("deepseek-mtp", FROZEN), FROZEN)
    table = jit_table(runs, FROZEN).set_index("at")
    moe = table.loc[pd.Timestamp("2026-11-30T15:46:38Z")]
    assert (moe.kernel, moe.engine_label, moe.load) == ("fused_moe_kernel", "mtp-k1-a0.85", "4 QPS")
    point = runs.set_index("point_id").loc[moe.point_id]
    assert (point.engine_label, point.request_rate_qps, point.stalled) == ("mtp-k1-a0.85", 4.0, True)
    assert moe.stalled is True
    # the spec-off server's first fused_moe_kernel compile came in its 1-QPS run, which did not stall
    off = table.loc[pd.Timestamp("2026-11-30T15:45:23Z")]
    assert (off.kernel, off.engine_label, off.load, off.stalled) == ("fused_moe_kernel", "spec-off", "1 QPS", False)
    # without a ``stalled`` column, the rows are marked from their scrapes
    assert jit_table(replay_case("deepseek-mtp", FROZEN), FROZEN).equals(jit_table(runs, FROZEN))
