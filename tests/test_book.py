"""Book-build smoke test: papermill in replay mode, then a strict Jupyter Book build, offline where possible."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

BOOK_FILES = ("_config.yml", "_toc.yml", "book", "notebooks", "data", "vllm_playbooks")


def _offline_prefix() -> list[str]:
    """Run under a network namespace with only loopback (kernels talk over 127.0.0.1) when the machine allows it."""
    probe = ["unshare", "-n", "sh", "-c", "ip link set lo up"]
    if shutil.which("unshare") and subprocess.run(probe, capture_output=True).returncode == 0:
        return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    return []


def test_book_builds_strictly_from_replayed_notebooks(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in BOOK_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("executed", "__pycache__"))
        else:
            shutil.copy(source, copy / name)
    offline = _offline_prefix()
    bindir = Path(sys.executable).parent
    subprocess.run(
        [*offline, sys.executable, "-m", "vllm_playbooks.notebooks", "execute-all", "--out", "book/executed"],
        cwd=copy, check=True, env={"PATH": f"{bindir}:/usr/bin:/bin", "PYTHONPATH": str(copy), "HOME": str(tmp_path)},
    )  # fmt: skip
    build = subprocess.run(
        [*offline, str(bindir / "jupyter-book"), "build", ".", "-W", "-n", "--keep-going"],
        cwd=copy, capture_output=True, text=True, env={"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    html = copy / "_build" / "html"
    for page in ("book/intro.html", "book/executed/llama_8b_draft_model.html", "book/executed/discussion_13834.html"):
        assert (html / page).exists(), page
    case_page = (html / "book/executed/llama_8b_draft_model.html").read_text()
    assert case_page.count("<img") >= 2
    assert "beat the baseline" in case_page  # the verdict sentence, computed from the data
    assert len(list((html / "_images").glob("*.png"))) >= 2
