"""Parity with vLLM 0.26's own validation on the inputs of issue 43: no refusal of what vLLM accepts, and no silent
pass of what it refuses."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from pydantic import ValidationError

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.spec_input import SUFFIX_DEFAULT_TREE_DEPTH
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.errors import ConfigError

DRAFT = {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}


def _spec(spec: dict):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_speculative_config(spec)


@pytest.mark.parametrize("k", [17, 32, 64])
def test_k_above_16_is_accepted_as_vllm_does(k: int) -> None:
    assert _spec({"method": "suffix", "num_speculative_tokens": k}).num_speculative_tokens == k
    assert _spec({**DRAFT, "num_speculative_tokens": k}).num_speculative_tokens == k


def test_suffix_without_k_takes_the_tree_depth() -> None:
    assert _spec({"method": "suffix"}).num_speculative_tokens == SUFFIX_DEFAULT_TREE_DEPTH == 24
    assert _spec({"method": "suffix", "suffix_decoding_max_tree_depth": 8}).num_speculative_tokens == 8


def test_k_omitted_is_refused_where_vllm_refuses_it_mtp_included() -> None:
    # recorded: vLLM 0.26 refuses mtp without k, without a model and (a TypeError) with one
    with pytest.raises(ConfigError, match="num_speculative_tokens must be provided"):
        _spec({"method": "mtp"})
    with pytest.raises(ConfigError, match="TypeError"):
        _spec({"method": "mtp", "model": "deepseek-v3"})
    with pytest.raises(ConfigError, match="num_speculative_tokens must be provided"):
        _spec({"method": "draft_model", "model": "llama-3.2-1b"})


@pytest.mark.parametrize("k", [True, False])
def test_a_boolean_k_is_refused_not_read_as_1(k: bool) -> None:
    with pytest.raises(ConfigError, match="must be an integer, got the boolean"):
        _spec({**DRAFT, "num_speculative_tokens": k})


def test_gpu_memory_utilization_1_is_accepted_and_above_1_refused() -> None:
    assert EngineConfig(label="a", model="llama-3.1-8b", max_model_len=2048, gpu_memory_utilization=1.0)
    with pytest.raises(ValidationError):
        EngineConfig(label="a", model="llama-3.1-8b", max_model_len=2048, gpu_memory_utilization=1.01)


def test_draft_slots_that_use_up_the_token_budget_are_refused() -> None:
    # issue 43's input: 256 batched tokens for 256 sequences, one draft slot each, leaves the scheduler nothing
    with pytest.raises(ValidationError, match="max_num_scheduled_tokens would be 0"):
        EngineConfig(
            label="d",
            model="llama-3.1-8b",
            max_model_len=2048,
            max_num_seqs=256,
            max_num_batched_tokens=256,
            speculative=_spec(DRAFT),
        )
    ok = EngineConfig(
        label="d",
        model="llama-3.1-8b",
        max_model_len=2048,
        max_num_seqs=256,
        max_num_batched_tokens=257,
        speculative=_spec(DRAFT),
    )
    assert ok.speculative.max_num_scheduled_tokens(257, 256) == 1  # type: ignore[union-attr]
    eagle = _spec({"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3})
    assert EngineConfig(
        label="e",
        model="gpt-oss-120b",
        max_model_len=2048,
        max_num_seqs=256,
        max_num_batched_tokens=256,
        speculative=eagle,
    )


def _check_config(tmp_path, engine: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    case = tmp_path / "mine.yaml"
    case.write_text(f"""case: mine
engines:
{engine}
loads:
  - {{input_len: 128, output_len: 64, concurrency: 1}}
""")
    return subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", "check-config", str(case)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_check_config_exits_2_with_one_error_line_or_0_with_advisories(  # type: ignore[no-untyped-def]
    tmp_path,
) -> None:
    bad = _check_config(
        tmp_path,
        """  - label: d
    model: llama-3.1-8b
    max_model_len: 2048
    max_num_seqs: 256
    max_num_batched_tokens: 256
    speculative: {method: draft_model, model: llama-3.2-1b, num_speculative_tokens: 4}""",
    )
    assert bad.returncode == 2, bad.stderr
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "max_num_scheduled_tokens" in lines[0]
    good = _check_config(
        tmp_path,
        """  - label: s
    model: llama-3.1-8b
    max_model_len: 2048
    speculative: {method: suffix, num_speculative_tokens: 32}""",
    )
    assert good.returncode == 0, good.stderr
    assert "advisory: method 'suffix' needs the arctic-inference package" in good.stdout
