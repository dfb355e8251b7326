"""The book's cases, one folder each (``config.case_file`` lists them): a case's grid, claims, published numbers and
its Python, whose checks (``claims.claim.check``) this module finds by listing the folders.

A new case is one folder here and one notebook (``notebooks/<case>.ipynb``): nothing else names it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from vllm_playbooks.claims.claim import Check, Evidence
from vllm_playbooks.claims.loading import load_evidence as load_evidence_with
from vllm_playbooks.config.case_file import case_names, package_name


def case_module(case: str) -> ModuleType:
    """The Python of case folder ``case`` (its checks and what its page computes)."""
    return importlib.import_module(f"{__name__}.{package_name(case)}")


def checks() -> dict[str, Check]:
    """Every case's checks by the name its ``claims.csv`` uses; ``ValueError`` for a name two checks share."""
    found: dict[str, Check] = {}
    for case in case_names():
        for value in vars(case_module(case)).values():
            if isinstance(value, Check):
                if value.name in found and found[value.name] is not value:
                    raise ValueError(f"check {value.name!r} is declared twice (case {case})")
                found[value.name] = value
    return found


def load_evidence(data: Path | None = None) -> Evidence:
    """The evidence the claims are judged on (``claims.loading.load_evidence``), with every case's checks."""
    return load_evidence_with(data, checks())
