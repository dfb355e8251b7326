"""One spelling of the command that runs a case live: ``vllm-playbooks reproduce --case <case>`` or
``make reproduce CASE=<case>``, with the case's hyphenated name, in every page, notebook, README and package string."""

from __future__ import annotations

import re
from pathlib import Path

from vllm_playbooks.config.case_file import grid_names

ROOT = Path(__file__).resolve().parents[3]
#: Where a reader or a contributor meets the command (data/ is the runner's, never edited by hand).
SOURCES = [
    "README.md",
    "CONTRIBUTING.md",
    "Makefile",
    "book/*.md",
    "notebooks/*.ipynb",
    "tools/*",
    "tests/fixtures/*.md",
    "vllm_playbooks/**/*.py",
    "vllm_playbooks/**/*.yaml",
]
#: A case as a command names it: a packaged case, or a placeholder in angle brackets or a make variable.
CASE = r"(?:<[a-z ]+>|\$\(CASE\)|[a-z0-9_-]+)"


def spelling_problems(text: str, cases: set[str]) -> list[str]:
    """The runs of the reproduce command in ``text`` spelled otherwise than the one way, and the case names given to
    ``--case`` or ``CASE=`` that are no packaged case (an underscore, a notebook of another name)."""
    problems = [m.group(0) for m in re.finditer(r"(?:vllm-playbooks|vllm_playbooks) reproduce(?! --case)\s+\S+", text)]
    problems += [m.group(0) for m in re.finditer(r"papermill notebooks/(?!workshop_)\S+\.ipynb[^`\n]*mode live", text)]
    for match in re.finditer(rf"(?:reproduce --case |make reproduce CASE=)({CASE})?", text):
        name = match.group(1)
        if name is None or not (name.startswith(("<", "$")) or name in cases):
            problems.append(match.group(0))
    return problems


def test_the_rule_finds_each_other_spelling() -> None:
    cases = {"discussion-13834"}
    one_way = "make reproduce CASE=discussion-13834; vllm-playbooks reproduce --case <case>"
    assert spelling_problems(one_way, cases) == []
    assert spelling_problems("make reproduce CASE=discussion_13834", cases) == ["make reproduce CASE=discussion_13834"]
    assert spelling_problems("vllm-playbooks reproduce discussion-13834 -p part quick", cases) == [
        "vllm-playbooks reproduce discussion-13834"
    ]
    assert spelling_problems("papermill notebooks/x.ipynb out.ipynb -p mode live", cases) != []


def test_every_source_spells_the_command_one_way() -> None:
    cases = set(grid_names())
    found = {
        str(path.relative_to(ROOT)): spelling_problems(path.read_text(encoding="utf-8"), cases)
        for pattern in SOURCES
        for path in sorted(ROOT.glob(pattern))
        if path.is_file()
    }
    assert len(found) > 30  # the globs still find the sources
    assert {path: problems for path, problems in found.items() if problems} == {}
