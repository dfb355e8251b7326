"""The book's table of contents: ``_toc.yml`` with its *Cases* part filled from the case folders.

``_toc.yml`` holds every page but the cases'; its part captioned ``Cases`` lists none. ``book_toc`` adds one chapter
per case that has a notebook (``notebooks/<case>.ipynb``), in the order of their grids' ``page_order``, and
``vllm-playbooks book`` writes the result where the build reads it (``jupyter-book build --toc``): a new case folder
with a notebook is a page of the book without any other file edited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vllm_playbooks.config.case_file import case_names
from vllm_playbooks.errors import ConfigError

#: The caption of the part of ``_toc.yml`` that ``book_toc`` fills with the case pages.
CASES_CAPTION = "Cases"
#: Where ``vllm-playbooks book`` writes the table the build reads.
BUILT_TOC = Path("_build") / "_toc.yml"


def case_pages(root: Path) -> list[str]:
    """The cases with a notebook in ``root/notebooks``, in the order of their grids' ``page_order``
    (``config.case_file.case_names``)."""
    return [case for case in case_names() if (root / "notebooks" / f"{case}.ipynb").is_file()]


def book_toc(root: Path) -> dict[str, Any]:
    """``root/_toc.yml`` with one chapter per case page (``case_pages``) in its ``Cases`` part; ``ConfigError`` where
    the table has no such part or already lists a page there."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    parts = [part for part in toc.get("parts", []) if part.get("caption") == CASES_CAPTION]
    if len(parts) != 1 or parts[0].get("chapters"):
        raise ConfigError(
            f"{root / '_toc.yml'}: needs one part captioned {CASES_CAPTION!r} with no chapters (the case "
            "pages are added from vllm_playbooks/cases/)"
        )
    parts[0]["chapters"] = [{"file": f"book/executed/{case}"} for case in case_pages(root)]
    return toc


def write_book_toc(root: Path, target: Path) -> Path:
    """Write ``book_toc(root)`` to ``target`` (relative to ``root`` where not absolute) and return its path."""
    path = target if target.is_absolute() else root / target
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(book_toc(root), sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path
