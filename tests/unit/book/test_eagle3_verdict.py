"""The EAGLE-3 page's verdict: the best draft length per load from a gain table, and the sentences it feeds."""

from __future__ import annotations

import re

import pandas as pd

from vllm_playbooks.book.eagle3_verdict import ClaimVerdict, best_k_loads, best_k_sentence, verdict_paragraph

ALPHA = 0.71


def _gains(points: dict[tuple[int, int], float], alpha: float = ALPHA) -> pd.DataFrame:
    """A gain table of the chat profile: (k, concurrency) to the gain in %, every point's band 5 %."""
    return pd.DataFrame(
        [
            {"profile": "chat", "k": k, "imposed_alpha": alpha, "concurrency": c, "gain_pct": g, "band_pct": 5.0}
            for (k, c), g in points.items()
        ]
    )


def _numbers(text: str) -> list[str]:
    return re.findall(r"[+-]\d+\.\d+|\d+", text)


def test_two_loads_with_the_same_best_k_read_as_one() -> None:
    gains = _gains({(3, 1): 55.2, (4, 1): 52.9, (3, 200): 55.4, (4, 200): 15.2, (3, 4): 30.0, (4, 4): 20.0})
    best = best_k_loads(pd.concat([gains, _gains({(4, 1): 90.0}, alpha=0.81)]), ALPHA)  # another α is left out
    assert best["loads"].tolist() == ["1-4", "200"] and best["best_k"].tolist() == [3, 3]
    sentence = best_k_sentence("H100", 3, best)
    assert _numbers(sentence) == ["100", "3", "3", "1", "4", "200", "+42.6", "+55.4"]
    assert sentence.count("k = ") == 1 and len(sentence.split()) <= 40


def test_each_band_names_its_best_k_and_gain() -> None:
    gains = _gains({(3, 1): 40.7, (4, 1): 39.9, (4, 32): 67.5, (3, 32): 60.0, (2, 200): 30.2, (3, 200): 21.2})
    best = best_k_loads(gains, ALPHA)
    assert best["best_k"].tolist() == [3, 4, 2] and best["loads"].tolist() == ["1", "32", "200"]
    sentence = best_k_sentence("H200", 1, best)
    assert re.findall(r"k = (\d) at (\d+)\D+?\(([+-]\d+\.\d) %\)", sentence) == [
        ("3", "1", "+40.7"),
        ("4", "32", "+67.5"),
        ("2", "200", "+30.2"),
    ]
    assert "1 run a side" in sentence and len(sentence.split()) <= 40


def test_a_load_with_one_k_has_no_best_and_no_sweep_says_so() -> None:
    assert best_k_loads(_gains({(3, 1): 40.0, (3, 200): 20.0}), ALPHA).empty
    assert _numbers(best_k_sentence("H100", None, best_k_loads(_gains({(3, 1): 40.0}), ALPHA))) == ["100"]


def test_the_verdicts_name_another_gpu_only_where_it_differs() -> None:
    best = "The best sentence."
    same = [ClaimVerdict("on A", "direction only", "H100", 3), ClaimVerdict("on B", "not reproduced", "H100", 3)]
    paragraph = verdict_paragraph(best, same)
    assert paragraph.startswith(best) and paragraph.count("**") == 4 and "H100" not in paragraph
    other = [*same[:1], ClaimVerdict("on B", "reproduced", "H200", 1)]
    assert verdict_paragraph(best, other).endswith("**reproduced** on B (on the H200, 1 run a side).")
    assert all(len(s.split()) <= 40 for s in re.split(r"(?<=\.) ", verdict_paragraph(best, other)))
