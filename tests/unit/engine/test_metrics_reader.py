"""The plain reader of Prometheus text (``engine.metrics._plain_snapshot``) gives what prometheus_client's parser gives,
on every recorded scrape and on the forms it hands over to that parser."""

from __future__ import annotations

import pytest

from vllm_playbooks import paths
from vllm_playbooks.engine import metrics
from vllm_playbooks.results.textfiles import read_text

HISTOGRAM = metrics.ITERATION_TOKENS


@pytest.mark.recorded_data
def test_on_every_recorded_scrape_the_plain_reader_reads_what_prometheus_client_reads() -> None:
    scrapes = sorted((paths.data_dir() / "runs").rglob("metrics_*.prom*"))
    assert scrapes
    for scrape in scrapes:
        text = metrics._snapshot_lines(read_text(scrape))
        assert metrics._plain_snapshot(text) == metrics._prometheus_snapshot(text), scrape


PLAIN = f"""# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} 2.0
vllm:num_preemptions_total{{engine="1",model_name="m"}} 3.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} 7.0 1700000000000
vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} 5.0
# TYPE {HISTOGRAM} histogram
{HISTOGRAM}_bucket{{le="1.0"}} 4.0
{HISTOGRAM}_bucket{{le="+Inf"}} 6.0
{HISTOGRAM}_count 6.0
{HISTOGRAM}_sum 20.0
stray_total 9.0
vllm:num_preemptions_total{{engine="2"}} 100.0
# TYPE vllm:request_success_total gauge
vllm:request_success_total 4.0
"""


def test_the_plain_reader_sums_label_sets_and_leaves_out_samples_of_no_family() -> None:
    snapshot = metrics._plain_snapshot(PLAIN)
    # the stray sample ends the counter's family: the sample after it belongs to none; a gauge's is not a counter
    assert snapshot.totals == {"vllm:num_preemptions_total": 5.0}
    assert snapshot.accepted_per_pos == {0: 7.0, 1: 5.0}
    assert snapshot.step_tokens == metrics.Histogram((1.0, float("inf")), (4.0, 6.0), 6.0, 20.0)
    assert snapshot == metrics._prometheus_snapshot(PLAIN)


@pytest.mark.parametrize(
    "line",
    [
        'vllm:num_preemptions_total{model_name="a \\"quoted\\" name"} 1.0',  # an escaped quote in a label value
        'vllm:num_preemptions_total{model_name="a}b"} 1.0',  # a brace in a label value
        "# HELP vllm:num_preemptions_total Preemptions.",  # a comment the snapshot lines do not keep
    ],
)
def test_text_in_another_form_goes_to_prometheus_client_and_reads_the_same(line: str) -> None:
    text = f"# TYPE vllm:num_preemptions_total counter\n{line}\n"
    with pytest.raises(metrics._NotPlain):
        metrics._plain_snapshot(text)
    assert metrics._parse_snapshot(text) == metrics._prometheus_snapshot(text)


def test_text_that_is_not_prometheus_still_raises() -> None:
    with pytest.raises(ValueError):
        metrics._parse_snapshot("vllm:num_preemptions_total{engine=0} one\n")
