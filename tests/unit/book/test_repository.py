"""The repository's URL is written once, in ``_config.yml``; the README's clone step follows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_playbooks.book import repository
from vllm_playbooks.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def test_a_configured_url_is_cloned_and_a_missing_or_empty_one_is_named_as_unknown(tmp_path: Path) -> None:
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://github.com/o/r\n", encoding="utf-8")
    assert repository.clone_command(tmp_path) == "git clone https://github.com/o/r"
    for text in ("title: x\n", 'repository:\n  url: ""\n'):
        (tmp_path / "_config.yml").write_text(text, encoding="utf-8")
        assert repository.repository_url(tmp_path) is None
        assert repository.clone_command(tmp_path) == "git clone <this repository's URL>"


def test_a_url_that_is_not_text_is_refused(tmp_path: Path) -> None:
    (tmp_path / "_config.yml").write_text("repository:\n  url: [a, b]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="'url' string"):
        repository.repository_url(tmp_path)


def test_the_readme_clones_as_the_config_says() -> None:
    assert repository.clone_command(ROOT) in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
