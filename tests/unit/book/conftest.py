"""A tiny book repository: one notebook that reads a data folder, for tests that run a real kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

#: The check cell prints the number of rows and the case folders it lists.
CHECK_SOURCE = (
    "rows = (paths.data_dir() / 'runs' / 'a' / 'runs.csv').read_text().splitlines()\n"
    "print(f'rows={len(rows) - 1}')\n"
    "print('cases', sorted(os.listdir(paths.data_dir() / 'runs')))"
)


def tiny_notebook(check_source: str = CHECK_SOURCE) -> nbformat.NotebookNode:
    """Parameters, imports, one ``nbval-check-output`` cell (id ``check01``) and one plain cell (id ``plain01``)."""
    params = nbformat.v4.new_code_cell('mode = "replay"', id="params01")
    params.metadata["tags"] = ["parameters"]
    imports = nbformat.v4.new_code_cell(
        "import os\nfrom vllm_playbooks import paths\n"
        "from vllm_playbooks.book.page_kernel import set_up_page_kernel\n\nset_up_page_kernel()",
        id="import01",
    )
    check = nbformat.v4.new_code_cell(check_source, id="check01")
    check.metadata["tags"] = ["nbval-check-output"]
    plain = nbformat.v4.new_code_cell("print('not stored')", id="plain01")
    nb = nbformat.v4.new_notebook(cells=[params, imports, check, plain])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture
def tiny_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``_config.yml``, ``notebooks/tiny.ipynb`` and ``data/runs/{a,b}/``; the working directory is its root."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "_config.yml").write_text("title: tiny\n")
    for case in ("a", "b"):
        (root / "data" / "runs" / case).mkdir(parents=True)
        (root / "data" / "runs" / case / "runs.csv").write_text("point,value\np1,1\n")
    (root / "data" / "unread.txt").write_text("no notebook opens this\n")
    nbformat.write(tiny_notebook(), root / "notebooks" / "tiny.ipynb")
    monkeypatch.delenv("VLLM_PLAYBOOKS_DATA_DIR", raising=False)
    monkeypatch.chdir(root)
    return root


def add_row(root: Path, case: str = "a") -> None:
    """A new measured row in ``data/runs/<case>/runs.csv``."""
    with (root / "data" / "runs" / case / "runs.csv").open("a") as rows:
        rows.write("p2,2\n")
