"""Shared fixtures: the repository, a stand-in vLLM server, and a stand-in ``vllm bench serve``."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
FAKE_SERVER = ROOT / "tests" / "fakes" / "fake_vllm_server.py"
T = TypeVar("T")


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data folder that the package uses instead of the repository's ``data/``."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("VLLM_PLAYBOOKS_DATA_DIR", str(folder))
    return folder


#: A frozen copy of a few recorded points, their rows and server logs, laid out as a data folder
#: (``tests/fixtures/recorded/README.md``): tests that pin what particular runs showed read it, not ``data/``, so the
#: runs each new session adds to ``data/runs/`` leave them alone.
FROZEN = FIXTURES / "recorded"


@pytest.fixture
def frozen_data(monkeypatch: pytest.MonkeyPatch) -> Path:
    """``FROZEN`` as the data folder the package uses, for code that reads the default one (``results_for``)."""
    monkeypatch.setenv("VLLM_PLAYBOOKS_DATA_DIR", str(FROZEN))
    return FROZEN


def fake_server_argv(port: int, *extra: str) -> list[str]:
    """argv of the stand-in server on ``port``."""
    return [sys.executable, str(FAKE_SERVER), "--port", str(port), *extra]


class FakeBench:
    """Writes a ``bench serve``-shaped result file, built from a real H200 capture with this run's prompt count."""

    def __init__(self, fail_on_call: int | None = None, lose_requests_on_call: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on_call = fail_on_call
        #: the call whose result reports three requests failed (a server that answered some requests with errors)
        self.lose_requests_on_call = lose_requests_on_call

    def __call__(self, argv: list[str], timeout_s: float | None = None) -> dict[str, Any]:
        self.calls.append(argv)
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("bench serve failed (as the test asked)")
        opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        result = json.loads((FIXTURES / "h200-draft-c16" / "bench.json").read_text())
        result["num_prompts"] = int(opt["--num-prompts"])
        result["completed"] = int(opt["--num-prompts"])
        if self.lose_requests_on_call is not None and len(self.calls) == self.lose_requests_on_call:
            result["completed"], result["failed"] = result["completed"] - 3, 3
        result["max_concurrency"] = int(opt["--max-concurrency"]) if "--max-concurrency" in opt else None
        Path(opt["--result-dir"], opt["--result-filename"]).write_text(json.dumps(result))
        return result


#: What a copy of the repository needs to execute the notebooks and build the book.
BOOK_FILES = ("_config.yml", "_toc.yml", "book", "notebooks", "data", "vllm_playbooks", "_mathjax")


def offline_prefix() -> list[str]:
    """Run under a network namespace with only loopback (kernels talk over 127.0.0.1) when the machine allows it."""
    probe = ["unshare", "-n", "sh", "-c", "ip link set lo up"]
    if shutil.which("unshare") and subprocess.run(probe, capture_output=True).returncode == 0:
        return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    return []


BOOK_TESTS, SITE_TESTS = ROOT / "tests" / "test_book.py", ROOT / "tests" / "site"
#: The test that runs the recorded-data tests again on grown data: minutes in one process (``make test-long``).
GROWN_DATA_TEST = ROOT / "tests" / "unit" / "test_recorded_data_grows.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the book tests (tests/test_book.py) and ``GROWN_DATA_TEST`` first, then the browser tests
    (``tests/site/``), then the rest.

    ``make test`` and ``make test-long`` run pytest-xdist workers with ``--dist worksteal``: each starts on its share
    of this list, in order, and one that runs out takes tests still waiting on another. So the worker of the first
    share builds the book (:func:`built_book`) and checks it in the browser while the others run unit tests, the
    longest test does not start last, and the tests left at the end are shared.
    """
    first = (BOOK_TESTS, GROWN_DATA_TEST)
    items.sort(key=lambda item: 0 if item.path in first else 1 if item.path.is_relative_to(SITE_TESTS) else 2)


def _build_book(tmp: Path) -> Path:
    """Copy what the book needs into ``tmp/repo``, replay its notebooks there and build it strictly, offline."""
    copy = tmp / "repo"
    copy.mkdir()
    for name in BOOK_FILES:
        source = ROOT / name
        if not source.exists():  # _mathjax comes from `make`; without it the site check names the formulas
            continue
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("executed", "__pycache__"))
        else:
            shutil.copy(source, copy / name)
    if (ROOT / "book" / "executed").is_dir():
        shutil.copytree(ROOT / "book" / "executed", copy / "book" / "executed")
    offline = offline_prefix()
    bindir = Path(sys.executable).parent
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "PYTHONPATH": str(copy), "HOME": str(tmp)}
    subprocess.run(
        [*offline, sys.executable, "-m", "vllm_playbooks", "book", "--out", "book/executed"],
        cwd=copy,
        check=True,
        env=env,
    )
    build = subprocess.run(
        [*offline, str(bindir / "jupyter-book"), "build", ".", "--toc", "_build/_toc.yml", "-W", "-n", "--keep-going"],
        cwd=copy,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return copy


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """``build(folder)``'s value, built once per test run, also under pytest-xdist: the first worker to ask makes the
    folder ``name`` in the run's shared temporary folder and builds while holding a lock; the others wait for it and
    read the same value (pickled beside it), or fail with the first one's error."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: <run's basetemp>/popen-gwN
    folder, failed, value = shared / name, shared / f"{name}.failed", shared / f"{name}.pickle"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            pytest.fail(f"{name} failed in another worker:\n{failed.read_text()}")
        if not value.exists():
            folder.mkdir()
            try:
                value.write_bytes(pickle.dumps(build(folder)))
            except BaseException as error:
                failed.write_text(str(error))
                raise
        return pickle.loads(value.read_bytes())


@pytest.fixture(scope="session")
def built_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository in which the notebooks ran (replay) and the book was built strictly, offline.

    Built once per test run (:func:`once_per_run`). The repository's ``book/executed`` (``make book``'s output)
    comes along, so ``vllm-playbooks book`` reuses every executed copy whose notebook, parameters, and the package
    files and data its run read are unchanged (``vllm_playbooks.book.cache``) and executes, offline, only the
    others; the strict Jupyter Book build is always a fresh one.
    """
    return once_per_run(tmp_path_factory, "book", _build_book)


@pytest.fixture(scope="session")
def recorded_evidence(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``cases.load_evidence()``: what the claims are judged on, read from the recorded data once per test run
    (:func:`once_per_run`; seconds of CSV and raw-file reading that several modules' tests share). Its checks are
    functions registered at import, which do not pickle: each worker attaches its own."""
    from vllm_playbooks import cases

    shared = once_per_run(
        tmp_path_factory, "evidence", lambda _folder: dataclasses.replace(cases.load_evidence(), checks={})
    )
    return dataclasses.replace(shared, checks=cases.checks())
