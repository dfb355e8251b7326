"""Acceptance scenarios: which configs of a grid one model could all be."""

from __future__ import annotations

from typing import Any

from vllm_playbooks.advisor.scenarios import (
    NO_IMPOSED,
    acceptance_scenarios,
    imposed_profile,
    label_matches,
    scenario_text,
)
from vllm_playbooks.config.engine import EngineConfig

LATER = [0.85, 0.5343, 0.3359]  # 0.85 first, then a constant conditional 0.6286 (the DeepSeek case's k=2/k=3)


def _engine(label: str, target: str = "llama-3.1-8b", draft: str | None = None, **speculative: Any) -> EngineConfig:
    if draft is not None:
        speculative["model"] = draft
    return EngineConfig(label=label, model=target, max_model_len=2048, max_num_seqs=64, speculative=speculative or None)


def _mtp(label: str, k: int, **acceptance: Any) -> EngineConfig:
    return _engine(label, "deepseek-v3-reduced", method="mtp", num_speculative_tokens=k, **acceptance)


def _synthetic(rates: list[float]) -> dict[str, Any]:
    return {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": rates}


def _labels(engines: list[EngineConfig]) -> dict[str, list[str]]:
    by_id = {e.config_id(): e for e in engines}
    return {s.label: sorted(by_id[c].label for c in s.config_ids) for s in acceptance_scenarios(by_id)}


def test_a_shorter_chain_of_the_same_rates_is_the_same_model_another_acceptance_is_another() -> None:
    engines = [
        _engine("off", "deepseek-v3-reduced"),
        _mtp("k1-a0.85", 1, acceptance_alpha=0.85),
        _mtp("k2-p0.85", 2, **_synthetic(LATER[:2])),
        _mtp("k3-p0.85", 3, **_synthetic(LATER)),
        _mtp("k1-a0.90", 1, acceptance_alpha=0.90),
    ]
    assert _labels(engines) == {
        "0.85": ["k1-a0.85", "k2-p0.85", "k3-p0.85", "off"],
        "0.9": ["k1-a0.90", "off"],
    }


def test_iid_and_decaying_rates_with_one_first_rate_are_two_scenarios_named_by_their_whole_profiles() -> None:
    engines = [
        _engine("off", "deepseek-v3-reduced"),
        _mtp("k1-a0.85", 1, acceptance_alpha=0.85),  # a prefix of both
        _mtp("k3-a0.85", 3, acceptance_alpha=0.85),  # 0.85, 0.72, 0.61
        _mtp("k3-p0.85", 3, **_synthetic(LATER)),
    ]
    assert _labels(engines) == {
        "0.85/0.5343/0.3359": ["k1-a0.85", "k3-p0.85", "off"],
        "0.85/0.7225/0.6141": ["k1-a0.85", "k3-a0.85", "off"],
    }


def test_speculation_whose_acceptance_is_measured_belongs_to_every_scenario() -> None:
    ngram = _engine("ngram", method="ngram", num_speculative_tokens=3, prompt_lookup_max=4)
    engines = [
        _engine("off"),
        ngram,
        _engine("d-a0.6", method="draft_model", draft="llama-3.2-1b", num_speculative_tokens=4, acceptance_alpha=0.6),
        _engine("d-a0.8", method="draft_model", draft="llama-3.2-1b", num_speculative_tokens=4, acceptance_alpha=0.8),
    ]
    assert imposed_profile(ngram) is None and imposed_profile(engines[0]) is None
    assert _labels(engines) == {"0.6": ["d-a0.6", "ngram", "off"], "0.8": ["d-a0.8", "ngram", "off"]}
    assert _labels(engines[:2]) == {NO_IMPOSED: ["ngram", "off"]}


def test_two_drafters_give_one_scenario_per_combination_of_their_acceptances() -> None:
    engines = [
        _engine("off"),
        _engine("d-a0.6", method="draft_model", draft="llama-3.2-1b", num_speculative_tokens=2, acceptance_alpha=0.6),
        _engine("d-a0.8", method="draft_model", draft="llama-3.2-1b", num_speculative_tokens=2, acceptance_alpha=0.8),
        _engine("n-a0.7", method="ngram", num_speculative_tokens=2, prompt_lookup_max=4, acceptance_alpha=0.7),
    ]
    assert _labels(engines) == {"0.6, 0.7": ["d-a0.6", "n-a0.7", "off"], "0.8, 0.7": ["d-a0.8", "n-a0.7", "off"]}


def test_a_label_is_matched_as_text_or_as_a_number_and_said_only_when_imposed() -> None:
    assert label_matches("0.71", "0.710") and label_matches("0.71", " 0.71 ") and not label_matches("0.71", "0.8")
    assert label_matches("0.85/0.5343/0.3359", "0.85/0.5343/0.3359") and not label_matches("0.85/0.5343/0.3359", "0.85")
    assert scenario_text("0.71") == ", imposed acceptance 0.71"
    assert scenario_text(NO_IMPOSED) == "" and scenario_text(None) == ""


def test_an_imposed_mean_acceptance_length_is_a_profile_of_its_own() -> None:
    def draft(label: str, length: float) -> EngineConfig:
        return _engine(
            label,
            draft="llama-3.2-1b",
            method="draft_model",
            num_speculative_tokens=4,
            rejection_sample_method="synthetic",
            synthetic_acceptance_length=length,
        )

    engines = [_engine("off"), draft("len2.5", 2.5), draft("len3", 3.0), draft("len3-again", 3.0)]
    assert _labels(engines) == {"length 2.5": ["len2.5", "off"], "length 3": ["len3", "len3-again", "off"]}
