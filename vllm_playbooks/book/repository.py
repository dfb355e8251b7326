"""Where the book's repository lives: ``repository.url`` in ``_config.yml``, the one place that names it.

Jupyter Book reads the same key for the theme's repository button; the rerun page's and the README's clone step read
it through ``clone_command``, so the URL is written once.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from vllm_playbooks import paths
from vllm_playbooks.errors import ConfigError

#: What the clone step names while ``_config.yml`` has no repository URL.
UNKNOWN_URL = "<this repository's URL>"


def repository_url(root: Path | None = None) -> str | None:
    """``repository.url`` of ``root/_config.yml`` (default: this repository's), or None where it is missing or empty;
    ``ConfigError`` where ``repository`` is not a mapping or its ``url`` not text."""
    config_path = (root or paths.find_repo_root()) / "_config.yml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    repository = config.get("repository") or {}
    if not isinstance(repository, dict) or not isinstance(repository.get("url") or "", str):
        raise ConfigError(f"{config_path}: 'repository' must be a mapping with a 'url' string, got {repository!r}")
    return repository.get("url") or None


def clone_command(root: Path | None = None) -> str:
    """The shell command that clones the repository: ``git clone <URL>``, with ``UNKNOWN_URL`` standing for a URL
    that ``_config.yml`` does not give yet."""
    return f"git clone {repository_url(root) or UNKNOWN_URL}"
