"""``analysis.kbest.best_ks``: the one rule that names a best k, with ties inside the noise band."""

from __future__ import annotations

from vllm_playbooks.analysis import kbest


def test_a_best_k_within_noise_of_another_is_a_tie() -> None:
    # EAGLE-3 on the H200 at concurrency 200, output tok/s by k (one run a point): k = 3 leads k = 2 by 0.7 %
    at_200 = {2: 6384.6, 3: 6427.0, 4: 5819.7, 5: 4680.6}
    assert kbest.best_ks(at_200) == [3, 2]  # the ledger's 'best k=3' was a tie with k = 2
    assert kbest.best_ks({2: 130.2, 3: 121.2, 4: 115.5, 5: 116.2}) == [2]  # 128-200 band means: k = 2 by 7.4 %
    # a side's spread widens the band: 8 % apart is a tie once k = 3's runs spread over 10 %
    assert kbest.best_ks({2: 108.0, 3: 100.0}) == [2]
    assert kbest.best_ks({2: 108.0, 3: 100.0}, {2: 1.0, 3: 10.0}) == [2, 3]
    assert kbest.best_ks({4: 1.0, 2: 1.0}) == [2, 4]  # equal values: the smaller k first
    assert kbest.best_ks({}) == []
