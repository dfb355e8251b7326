"""Which GPU's verdict a claim leads with, and where two GPUs' verdicts of one claim disagree beyond their bands.

A claim judged on each GPU's rows alone (``claims.ledger.judged_per_gpu``) has a verdict per GPU. The one the ledger,
the key findings and the case page state first is the best-evidenced: the GPU with the most clean runs a side at the
points the verdict compares (``lead_gpu``); a tie goes to the reference GPU (``hardware.REFERENCE_GPU``). The others
are kept beside it, and where one differs from the lead's beyond what the noise of either explains (``disagree``),
the page says so and keeps both.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_playbooks.claims.verdict import DATA_VERDICTS
from vllm_playbooks.hardware import REFERENCE_GPU

#: The columns of ``analysis.compare.versus_baseline``'s rows that name a compared point apart from its GPU: the
#: speculative config, the workload and the load. Two GPUs' rows with the same values compare the same point.
POINT_COLUMNS = ("engine_label", "input_len", "output_len", "random_range_ratio", "concurrency", "request_rate_qps")


def lead_gpu(runs: Mapping[str, int | None], reference: str = REFERENCE_GPU) -> str:
    """The GPU whose verdict a claim leads with, of ``runs`` (GPU → the fewest clean runs of any side of any point its
    verdict compares; None where it compares none or does not count them, which ranks below any count): the most runs
    a side; a tie goes to ``reference``, then to the first name. ``ValueError`` for no GPU."""
    if not runs:
        raise ValueError("no GPU to lead with")
    return min(runs, key=lambda gpu: (-(runs[gpu] if runs[gpu] is not None else -1), gpu != reference, gpu))


def beyond_bands(pairs: pd.DataFrame | None, other: pd.DataFrame | None) -> bool | None:
    """Whether two GPUs' compared points (``analysis.compare.versus_baseline`` rows, as ``CheckResult.pairs`` holds
    them) differ beyond their noise: at some point both compare (``POINT_COLUMNS``), the two changes (``change_pct``)
    lie further apart than the wider of the two bands (``band_pct``). None where they share no point, so noise
    cannot be told from a difference."""
    if pairs is None or other is None or pairs.empty or other.empty:
        return None
    keys = [c for c in POINT_COLUMNS if c in pairs.columns and c in other.columns]
    left, right = (frame.assign(**{k: frame[k].astype("string").fillna("—") for k in keys}) for frame in (pairs, other))
    both = left[[*keys, "change_pct", "band_pct"]].merge(right[[*keys, "change_pct", "band_pct"]], on=keys)
    if both.empty:
        return None
    apart = (both["change_pct_x"].astype(float) - both["change_pct_y"].astype(float)).abs()
    wider = both[["band_pct_x", "band_pct_y"]].astype(float).max(axis=1)
    return bool((apart > wider).any())


def disagree(verdict: str, pairs: pd.DataFrame | None, other_verdict: str, other: pd.DataFrame | None) -> bool:
    """Whether two GPUs' verdicts of one claim disagree: both rest on rows (``DATA_VERDICTS``), the
    words differ, and their compared points differ beyond their bands (``beyond_bands``), or share no point that
    could show the difference to be noise. Two verdicts whose points agree within the bands, each word near a
    tolerance's edge, do not disagree."""
    words = {str(v) for v in DATA_VERDICTS}
    if verdict == other_verdict or verdict not in words or other_verdict not in words:
        return False
    return beyond_bands(pairs, other) is not False
