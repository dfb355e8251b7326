"""Where things live: the repository root and the data folders, found the same way by papermill, nbval and the book."""

from __future__ import annotations

import os
from pathlib import Path

from vllm_playbooks.errors import ConfigError

#: Environment variable that overrides the data folder (tests point it at a temporary directory).
DATA_DIR_ENV = "VLLM_PLAYBOOKS_DATA_DIR"


#: The repository this package was loaded from (an editable install or a clone on ``sys.path``), where it holds the
#: book's ``_config.yml``: the root ``find_repo_root`` falls back to for a command run from outside any repository.
PACKAGE_REPO = Path(__file__).resolve().parents[1]


def find_repo_root(start: Path | None = None) -> Path:
    """Walk up from ``start`` (default: the working directory) to the folder holding ``_config.yml``; from the
    working directory outside any repository (your own case file in your own folder), the repository the package was
    loaded from (``PACKAGE_REPO``) where it is one.

    Papermill runs a kernel in the caller's directory, nbval in the notebook's folder and the book build in
    the repo root; walking up to the book's config makes all three agree.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file():
            return folder
    if start is None and (PACKAGE_REPO / "_config.yml").is_file():
        return PACKAGE_REPO
    raise ConfigError(
        f"No _config.yml found in {here} or any folder above it. Run from inside the repository "
        f"or set {DATA_DIR_ENV} to the data folder."
    )


def data_dir(start: Path | None = None) -> Path:
    """The ``data/`` folder: ``$VLLM_PLAYBOOKS_DATA_DIR`` if set, else ``<repo root>/data``."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).resolve()
    return find_repo_root(start) / "data"


def runs_dir(case: str, start: Path | None = None) -> Path:
    """The folder that holds one case's measured runs: ``data/runs/<case>/``."""
    return data_dir(start) / "runs" / case
