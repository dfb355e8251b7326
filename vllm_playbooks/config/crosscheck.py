"""The project's speculative_config checks beside vLLM's own, on one table of cases.

Each case is what a user would type: a target model, ``--tensor-parallel-size`` and a ``--speculative-config``
mapping in vLLM's own field names. ``our_verdict`` runs this package's checks (``EngineConfig`` and
``check_engine_against_shapes``), which need no vLLM; ``vllm_verdict`` runs vLLM's: the server's argument parser and
``create_engine_config()`` — everything ``vllm serve`` validates before it loads weights. The second needs vLLM
installed (it ran on the GPU machine); its results are recorded in ``data/checks/`` and replayed by the book.

Run it where vLLM is installed: ``python -m vllm_playbooks.config.crosscheck --out data/checks``.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vllm_playbooks.errors import ConfigError

Outcome = Literal["accepted", "refused"]

#: The file the recorded cross-check lives in, under ``data/checks/``.
RECORD_NAME = "speculative-config-crosscheck.csv"


class CrossCheckCase(BaseModel):
    """One user input: the target, its tensor parallelism and the ``--speculative-config`` mapping."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    target: str = Field(description="shape name of the target model")
    speculative: dict[str, Any] = Field(description="the --speculative-config mapping, vLLM field names")
    tensor_parallel_size: int = Field(1, ge=1)
    max_model_len: int = Field(2048, ge=16)
    why: str = Field(description="what the case probes")


class Verdict(BaseModel):
    """Accepted or refused, the first line of the refusal, and the warnings raised on the way."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    message: str = ""
    warnings: tuple[str, ...] = ()


def _case(label: str, target: str, spec: dict[str, Any], why: str, tp: int = 1) -> CrossCheckCase:
    return CrossCheckCase(label=label, target=target, speculative=spec, tensor_parallel_size=tp, why=why)


DRAFT = {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}

CASES: tuple[CrossCheckCase, ...] = (
    _case("draft-ok", "llama-3.1-8b", DRAFT, "a plain draft model"),
    _case("draft-tp-key", "llama-3.1-8b", {**DRAFT, "tensor_parallel_size": 1},
          "tensor_parallel_size instead of draft_tensor_parallel_size"),
    _case("draft-temperature", "llama-3.1-8b", {**DRAFT, "temperature": 0.7}, "a sampling parameter in the config"),
    _case("draft-top-p", "llama-3.1-8b", {**DRAFT, "top_p": 0.9}, "a sampling parameter in the config"),
    _case("draft-tp2-on-tp1", "llama-3.1-8b", {**DRAFT, "draft_tensor_parallel_size": 2},
          "draft TP above the target's"),
    _case("draft-tp1-on-tp2", "llama-3.1-8b", {**DRAFT, "draft_tensor_parallel_size": 1},
          "draft TP 1 under a TP=2 target", tp=2),
    _case("draft-tp2-on-tp2", "llama-3.1-8b", {**DRAFT, "draft_tensor_parallel_size": 2},
          "draft TP equal to the target's", tp=2),
    _case("draft-k0", "llama-3.1-8b", {**DRAFT, "num_speculative_tokens": 0}, "k = 0"),
    _case("draft-no-model", "llama-3.1-8b", {"method": "draft_model", "num_speculative_tokens": 4},
          "draft_model without a model"),
    _case("draft-no-k", "llama-3.1-8b", {"method": "draft_model", "model": "llama-3.2-1b"},
          "num_speculative_tokens omitted"),
    _case("draft-bad-quant", "llama-3.1-8b", {**DRAFT, "quantization": "int3"}, "an unknown quantization"),
    _case("draft-bad-sample", "llama-3.1-8b", {**DRAFT, "draft_sample_method": "top_k"},
          "an unknown draft_sample_method"),
    _case("draft-eager", "llama-3.1-8b", {**DRAFT, "enforce_eager": True}, "an eager drafter"),
    _case("draft-long-len", "llama-3.1-8b", {**DRAFT, "max_model_len": 4096},
          "draft max_model_len above the target's 2048"),
    _case("draft-unknown-method", "llama-3.1-8b", {**DRAFT, "method": "medusa2"}, "a misspelt method"),
    _case("draft-schedule", "llama-3.1-8b",
          {**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 256, 0]]},
          "speculation off above 16 requests"),
    _case("draft-schedule-k-too-big", "llama-3.1-8b",
          {**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 16, 6]]}, "a schedule asking more than k"),
    _case("draft-synthetic", "llama-3.1-8b",
          {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.64, 0.51, 0.41]},
          "imposed acceptance, k rates"),
    _case("draft-synthetic-short", "llama-3.1-8b",
          {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.64]},
          "imposed acceptance with fewer rates than k"),
    _case("draft-synthetic-above-1", "llama-3.1-8b",
          {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1.2, 0.64, 0.51, 0.41]},
          "a rate above 1"),
    _case("draft-synthetic-length", "llama-3.1-8b",
          {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0},
          "imposed mean acceptance length"),
    _case("draft-rates-without-synthetic", "llama-3.1-8b",
          {**DRAFT, "synthetic_acceptance_rates": [0.8, 0.64, 0.51, 0.41]},
          "rates without rejection_sample_method synthetic"),
    _case("ngram-ok", "llama-3.1-8b",
          {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
          "n-gram lookup"),
    _case("ngram-min-above-max", "llama-3.1-8b",
          {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2},
          "prompt_lookup_min above prompt_lookup_max"),
    _case("ngram-as-model", "llama-3.1-8b", {"model": "[ngram]", "num_speculative_tokens": 3},
          "the old model='[ngram]' spelling"),
    _case("ngram-suffix-field", "llama-3.1-8b",
          {"method": "ngram", "num_speculative_tokens": 3, "suffix_decoding_min_token_prob": 0.2},
          "a suffix-only field on ngram"),
    _case("suffix-ok", "llama-3.1-8b", {"method": "suffix", "num_speculative_tokens": 8}, "suffix decoding"),
    _case("suffix-bad-prob", "llama-3.1-8b",
          {"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_min_token_prob": 1.5},
          "a probability above 1"),
    _case("eagle3-ok", "gpt-oss-120b",
          {"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3}, "an EAGLE3 head"),
    _case("eagle3-inferred", "gpt-oss-120b", {"model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3},
          "method omitted: inferred from 'eagle3' in the path"),
    _case("eagle3-parallel-drafting", "gpt-oss-120b",
          {"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3,
           "parallel_drafting": True}, "parallel drafting with EAGLE3"),  # fmt: skip
    _case("mtp-k1", "deepseek-v3", {"method": "mtp", "num_speculative_tokens": 1}, "DeepSeek MTP, the start"),
    _case("mtp-k2", "deepseek-v3", {"method": "mtp", "num_speculative_tokens": 2},
          "k = 2 reruns the one MTP layer"),
    _case("mtp-parallel-drafting", "deepseek-v3",
          {"method": "mtp", "num_speculative_tokens": 1, "parallel_drafting": True}, "parallel drafting with MTP"),
    _case("mtp-on-llama", "llama-3.1-8b", {"method": "mtp", "num_speculative_tokens": 1},
          "MTP on a model without MTP layers"),
    _case("mtp-mimo", "mimo-7b", {"method": "mtp", "num_speculative_tokens": 1}, "MiMo's MTP layer"),
    _case("mtp-inferred", "deepseek-v3", {"model": "deepseek-v3", "num_speculative_tokens": 1},
          "method omitted, the target itself as model"),
    _case("empty", "llama-3.1-8b", {}, "an empty mapping"),
    _case("k-only", "llama-3.1-8b", {"num_speculative_tokens": 3}, "neither method nor model"),
)  # fmt: skip


def case_by_label(label: str) -> CrossCheckCase:
    """The case named ``label``; ``ConfigError`` naming the known labels otherwise."""
    for case in CASES:
        if case.label == label:
            return case
    raise ConfigError(f"no cross-check case {label!r}; known: {', '.join(c.label for c in CASES)}")


def our_verdict(case: CrossCheckCase) -> Verdict:
    """This package's verdict on ``case``: ``EngineConfig`` (field checks, method inference, draft TP) and
    ``check_engine_against_shapes`` (the checks against the target)."""
    from vllm_playbooks.config.engine import EngineConfig, check_engine_against_shapes
    from vllm_playbooks.config.speculative import SpeculativeConfigWarning, build_speculative_config

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpeculativeConfigWarning)
        try:
            engine = EngineConfig(
                label=case.label,
                model=case.target,
                max_model_len=case.max_model_len,
                tensor_parallel_size=case.tensor_parallel_size,
                speculative=build_speculative_config(case.speculative),
            )
            check_engine_against_shapes(engine)
        except (ConfigError, ValidationError) as error:
            return Verdict(outcome="refused", message=_first_line(error), warnings=_texts(caught))
    return Verdict(outcome="accepted", warnings=_texts(caught))


def vllm_argv(case: CrossCheckCase) -> list[str]:
    """The server arguments (after the program name) that put ``case`` to vLLM, as ``vllm serve`` would get them;
    a shape name (target, or the mapping's ``model``) becomes the path the runner serves it from (``vllm_path``)."""
    from vllm_playbooks.shapes import SHAPES_DIR, TOKENIZER_DIR, resolve_model, vllm_path

    spec = dict(case.speculative)
    if isinstance(spec.get("model"), str) and (SHAPES_DIR / spec["model"]).is_dir():
        spec["model"] = str(vllm_path(resolve_model(spec["model"]), create=True))
    return [
        "--model", str(vllm_path(resolve_model(case.target), create=True)),
        "--tokenizer", str(TOKENIZER_DIR),
        "--load-format", "dummy",
        "--max-model-len", str(case.max_model_len),
        "--tensor-parallel-size", str(case.tensor_parallel_size),
        "--speculative-config", json.dumps(spec),
    ]  # fmt: skip


def vllm_verdict(case: CrossCheckCase) -> Verdict:
    """vLLM's verdict on ``case``: its server argument parser, then ``create_engine_config()``. Needs vLLM."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    records: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = _Collect(level=logging.WARNING)
    logger = logging.getLogger("vllm")
    logger.addHandler(handler)
    try:
        parser = make_arg_parser(FlexibleArgumentParser())
        try:
            args = parser.parse_args(vllm_argv(case))
            AsyncEngineArgs.from_cli_args(args).create_engine_config()
        except SystemExit as error:  # argparse refuses by exiting
            return Verdict(outcome="refused", message=f"argument parser exited ({error.code})", warnings=tuple(records))
        except Exception as error:  # noqa: BLE001 - any refusal is the datum
            return Verdict(outcome="refused", message=f"{type(error).__name__}: {_first_line(error)}",
                           warnings=tuple(records))  # fmt: skip
    finally:
        logger.removeHandler(handler)
    return Verdict(outcome="accepted", warnings=tuple(records))


def _first_line(error: BaseException) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(str(e["msg"]) for e in error.errors())
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _texts(caught: Iterable[warnings.WarningMessage]) -> tuple[str, ...]:
    return tuple(_first_line(Warning(str(w.message))) for w in caught)


def _vllm_verdict_by_label(label: str) -> dict[str, Any]:
    """Worker entry (a fresh process per case: vLLM's configs set process-wide state)."""
    return vllm_verdict(case_by_label(label)).model_dump()


def crosscheck_rows(cases: Iterable[CrossCheckCase], vllm_verdicts: dict[str, Verdict]) -> pd.DataFrame:
    """One row per case: the input, both verdicts, and whether the outcomes agree."""
    rows = []
    for case in cases:
        ours, theirs = our_verdict(case), vllm_verdicts[case.label]
        rows.append({
            "label": case.label, "why": case.why, "target": case.target,
            "tensor_parallel_size": case.tensor_parallel_size,
            "speculative_config": json.dumps(case.speculative, sort_keys=True),
            "ours": ours.outcome, "ours_message": ours.message, "ours_warnings": " | ".join(ours.warnings),
            "vllm": theirs.outcome, "vllm_message": theirs.message,
            "vllm_warnings": " | ".join(w for w in theirs.warnings if "speculat" in w.lower() or "draft" in w.lower()),
            "agree": ours.outcome == theirs.outcome,
        })  # fmt: skip
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    """Run every case through vLLM (one process each) and write the table and its provenance under ``--out``."""
    from vllm_playbooks.results.provenance import collect_provenance

    parser = argparse.ArgumentParser(prog="python -m vllm_playbooks.config.crosscheck", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=spawn, max_tasks_per_child=1) as pool:
        results = dict(zip([c.label for c in CASES], pool.map(_vllm_verdict_by_label, [c.label for c in CASES]),
                           strict=True))  # fmt: skip
    table = crosscheck_rows(CASES, {label: Verdict(**v) for label, v in results.items()})
    table.to_csv(args.out / RECORD_NAME, index=False)
    (args.out / "speculative-config-crosscheck.provenance.json").write_text(
        collect_provenance().model_dump_json(indent=2) + "\n"
    )
    print(table[["label", "ours", "vllm", "agree"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
