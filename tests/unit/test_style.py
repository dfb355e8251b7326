"""The style rules of issue 69 in spirit: ``ruff format`` clean, few ``# fmt: skip`` markers, no line over 120
characters, and sentences built in the book's layers (book/, the case folders, the command line), not below them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

#: The folders whose Python files the rules cover.
CHECKED = ("vllm_playbooks", "tests")
MAX_LINE = 120
#: At most this many ``# fmt: skip`` markers in the repository's Python files (fewer than 20).
MAX_FMT_SKIPS = 19
#: Where a function may return a sentence: the layers that write the book's and the command line's text.
PROSE_LAYERS = ("vllm_playbooks/book/", "vllm_playbooks/cases/", "vllm_playbooks/cli/")
#: A returned string of this many words or more is prose, not a label.
PROSE_WORDS = 4


def python_files() -> list[Path]:
    """The Python files under ``CHECKED``."""
    return sorted(p for folder in CHECKED for p in (ROOT / folder).rglob("*.py"))


def _words(node: ast.AST) -> int:
    """Words of a string literal, or of an f-string's literal text (its replacement fields left out); 0 otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return len(node.value.split())
    if isinstance(node, ast.JoinedStr):
        return len("".join(v.value for v in node.values if isinstance(v, ast.Constant)).split())
    return 0


def prose_returns(path: Path, module: str) -> set[str]:
    """``module:function`` for each function of ``path`` with a ``return`` whose value holds a string literal or an
    f-string of ``PROSE_WORDS`` words or more."""
    found = set()
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            values = [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
            if any(_words(part) >= PROSE_WORDS for value in values for part in ast.walk(value)):
                found.add(f"{module}:{function.name}")
    return found


def test_ruff_format_leaves_the_package_and_tests_alone() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *map(str, python_files())],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_few_fmt_skip_markers() -> None:
    skips = sum(p.read_text(encoding="utf-8").count("# fmt: skip") for p in python_files())
    assert skips <= MAX_FMT_SKIPS


def test_no_line_is_longer_than_120_characters() -> None:
    long = {
        f"{path.relative_to(ROOT)}:{number}"
        for path in python_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if len(line) > MAX_LINE
    }
    assert not long, sorted(long)


def test_only_the_book_layers_return_sentences() -> None:
    offenders = set()
    for path in (ROOT / "vllm_playbooks").rglob("*.py"):
        relative = path.relative_to(ROOT)
        if not str(relative).startswith(PROSE_LAYERS):
            module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
            offenders |= prose_returns(path, module)
    assert not offenders, sorted(offenders)


def test_the_prose_scan_tells_a_sentence_from_a_label(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "def label(a, b):\n    return f'{a}-{b} k={b}'\n\n"
        "def sentence(n):\n    if n:\n        return f'{n} runs stalled before the end'\n    return 'ok'\n\n"
        "def error(n):\n    raise ValueError(f'{n} is not a number of runs at all')\n"
    )
    assert prose_returns(source, "m") == {"m:sentence"}
