"""The rows the step-time model is calibrated on, read from the recorded cases, and the measured points a what-if curve
is drawn beside."""

from __future__ import annotations

from typing import Any

import pandas as pd

from vllm_playbooks.analysis.compare import is_control, recorded_speculative
from vllm_playbooks.config.case_file import calibration_cases
from vllm_playbooks.hardware import REFERENCE_DATASHEET, Gpu, measured_on
from vllm_playbooks.model.steps import _get
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.results.schema import RUN_COLUMNS
from vllm_playbooks.results.stalls import mark_stalled
from vllm_playbooks.results.store import rows_to_frame

#: The speculative methods the step-time model covers: a separate draft model (its forwards are the draft shape's
#: roofline plus t_d). MTP modules and EAGLE heads run with async scheduling and other fixed costs; their pages model
#: them with ``model.prediction.speculation_prediction``.
MODELLED_SPEC_METHODS = ("none", "draft_model")


def calibrates(row: Any) -> bool:
    """Whether a recorded row (a row object or a dict) may calibrate the model: False for rows the model does not
    describe (open-loop loads without a concurrency, more than one GPU, a speculative method other than
    ``MODELLED_SPEC_METHODS``), for configs with a batch-size schedule (the model takes k as fixed and the decode steps
    as full CUDA graphs, and a schedule changes both: vLLM 0.26 runs it with PIECEWISE graphs only) and for controls
    that force a model runner or a CUDA-graph mode (``analysis.is_control``): the model is of the servers as vLLM
    chooses to run them."""

    concurrency = _get(row, "concurrency")
    if concurrency is None or concurrency != concurrency or _get(row, "spec_method") not in MODELLED_SPEC_METHODS:
        return False
    if int(_get(row, "tensor_parallel_size") or 1) != 1 or int(_get(row, "pipeline_parallel_size") or 1) != 1:
        return False
    config = _get(row, "engine_config_json")
    spec = recorded_speculative(config)
    scheduled = spec is not None and not spec.keeps_full_cudagraphs
    return not scheduled and not is_control(config)


def calibration_rows(gpu: Gpu | str = REFERENCE_DATASHEET) -> list[Any]:
    """Every recorded row (spec off and on) of the cases that calibrate the what-if
    (``config.case_file.calibration_cases``) measured on ``gpu`` (a datasheet row; the
    reference H200 by default: a fit is of one GPU, so rows of others stay out), rebuilt from the raw files, that
    ``calibrates`` and did not stall (``results.stalls``: the pages and the claims ledger leave stalled rows out
    too)."""

    keep = []
    for case in calibration_cases():
        rows = replay_rows(case)
        stalled = mark_stalled(rows_to_frame(rows, RUN_COLUMNS))["stalled"].astype(bool).tolist()
        keep += [
            row
            for row, stall in zip(rows, stalled, strict=True)
            if not stall and measured_on(row.gpu_name, gpu) and calibrates(row)
        ]
    return keep


def measured_overlay(gpu: Gpu | str, model: str, draft_model: str | None = None, k: int = 0) -> pd.DataFrame:
    """Recorded rows of ``model`` on ``gpu`` (spec off, and with ``draft_model`` at ``k``) to draw beside a prediction;
    empty for a GPU without such rows."""

    keep = [
        r
        for r in calibration_rows(gpu)
        if r.model_shape == model
        and (r.spec_method == "none" or (r.draft_model == draft_model and r.num_speculative_tokens == k))
    ]
    return rows_to_frame(keep, RUN_COLUMNS)
