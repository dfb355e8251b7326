"""Hostile YAML is refused in bounded time and memory, before any object is built; vLLM's (and the runner's) numeric
bounds refuse a mistyped number."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from vllm_playbooks.config import yaml_limits
from vllm_playbooks.config.yaml_limits import bounded_yaml, read_bounded
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import load_plan, parse_parameter_pairs

pytestmark = pytest.mark.filterwarnings("ignore::vllm_playbooks.config.spec_detection.SpeculativeConfigWarning")

GOOD = """case: my-case
title: a case of one's own
engine_defaults: {model: tiny-llama, max_model_len: 512}
engines:
  - label: spec-off
  - label: ngram-k2
    speculative: {method: ngram, num_speculative_tokens: 2, prompt_lookup_max: 3}
loads: {input_len: 64, output_len: 16, concurrency: [1, 4]}
"""


def _bomb(levels: int, width: int = 9) -> str:
    """A billion-laughs document under the free-text ``title``: ``width ** levels`` scalars once expanded."""
    lines = ["case: my-case", f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    lines.append(f"title: *a{levels - 1}")
    return "\n".join(lines) + "\n"


def _refused_quickly(text: str, tmp_path: Path) -> str:
    path = tmp_path / "my-case.yaml"
    path.write_text(text)
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ConfigError) as refused:
        load_plan(str(path))
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 2.0
    assert peak < 50 * 2**20
    return str(refused.value)


def test_the_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "my-case.yaml"
    path.write_text(GOOD)
    assert len(load_plan(str(path)).points()) == 4


@pytest.mark.parametrize("levels", [6, 9, 12])
def test_an_alias_bomb_under_a_free_text_field_is_refused_in_bounded_time_and_memory(
    levels: int, tmp_path: Path
) -> None:
    assert "alias" in _refused_quickly(_bomb(levels), tmp_path)


def test_a_few_aliases_within_the_bound_are_read() -> None:
    assert bounded_yaml("a: &x [1, 2]\nb: *x\n", "t") == {"a": [1, 2], "b": [1, 2]}


def test_expanded_text_is_bounded_as_well_as_nodes() -> None:
    big = "x" * yaml_limits.MAX_SCALAR_CHARS
    copies = yaml_limits.MAX_CHARS // len(big) + 1
    with pytest.raises(ConfigError):
        bounded_yaml(f"a: &s {big}\nb: [{', '.join(['*s'] * copies)}]\n", "t")


@pytest.mark.parametrize(
    "text",
    [
        "case: x\nt: " + "[" * 40 + "]" * 40 + "\n",
        "case: x\nt: " + "[" * 5000 + "]" * 5000 + "\n",
        "case: x\ntitle: " + "a" * (yaml_limits.MAX_SCALAR_CHARS + 1) + "\n",
        "case: x\n" + "k: [" + ", ".join(["1"] * (yaml_limits.MAX_BYTES // 3)) + "]\n",
        "case: x\nt: *nowhere\n",
    ],
)
def test_depth_length_size_and_dangling_aliases_are_refused(text: str, tmp_path: Path) -> None:
    _refused_quickly(text, tmp_path)


def test_within_the_depth_bound_is_read() -> None:
    depth = yaml_limits.MAX_DEPTH - 1
    assert bounded_yaml("[" * depth + "]" * depth, "t") is not None


def test_a_large_file_is_read_no_further_than_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (10 * yaml_limits.MAX_BYTES))
    with pytest.raises(ConfigError):
        read_bounded(path, "big.yaml")
    path.write_bytes(b"case: x\n")
    assert read_bounded(path, "big.yaml") == "case: x\n"


def test_parameters_are_bounded_too() -> None:
    with pytest.raises(ConfigError):
        parse_parameter_pairs([["concurrency", _bomb(9)]])
    assert parse_parameter_pairs([["concurrency", "[1, 4]"]]) == {"concurrency": [1, 4]}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("num_speculative_tokens: 2", "num_speculative_tokens: 1000000000"),
        ("num_speculative_tokens: 2", "num_speculative_tokens: 1.0e+9"),
        ("num_speculative_tokens: 2", "num_speculative_tokens: 512"),
        ("concurrency: [1, 4]", "concurrency: [1, 1000000000]"),
        ("concurrency: [1, 4]", "request_rate_qps: [1.0e+12]"),
        ("loads:", "repeats: 1000000000\nloads:"),
        ("loads:", "min_duration_s: 1.0e+300\nloads:"),
        ("loads:", "parts: 7\nloads:"),
    ],
)
def test_numbers_beyond_vllm_s_and_the_runner_s_bounds_are_refused(old: str, new: str, tmp_path: Path) -> None:
    assert old in GOOD
    _refused_quickly(GOOD.replace(old, new), tmp_path)


def test_the_largest_draft_length_within_max_model_len_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "my-case.yaml"
    path.write_text(
        GOOD.replace("num_speculative_tokens: 2", "num_speculative_tokens: 511").replace(
            "input_len: 64, output_len: 16", "input_len: 8, output_len: 8"
        )
    )
    assert load_plan(str(path), engines=["ngram-k2"]).engines[0].num_speculative_tokens == 511
