"""Where the repository is found: from the working directory up, else (from a folder outside any repository, where a
user keeps a case file of their own) the repository the package was loaded from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from vllm_playbooks import paths
from vllm_playbooks.errors import ConfigError


def test_from_inside_the_repository_its_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT / "notebooks")
    assert paths.find_repo_root() == ROOT


def test_from_outside_any_repository_the_packages_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    assert paths.find_repo_root() == paths.PACKAGE_REPO == ROOT
    assert paths.data_dir() == ROOT / "data"


def test_an_explicit_start_outside_any_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="_config.yml"):
        paths.find_repo_root(tmp_path)
