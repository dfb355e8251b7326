"""Shared fixtures: the repository, a stand-in vLLM server, and a stand-in ``vllm bench serve``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
FAKE_SERVER = ROOT / "tests" / "fakes" / "fake_vllm_server.py"


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data folder that the package uses instead of the repository's ``data/``."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("VLLM_PLAYBOOKS_DATA_DIR", str(folder))
    return folder


def fake_server_argv(port: int, *extra: str) -> list[str]:
    """argv of the stand-in server on ``port``."""
    return [sys.executable, str(FAKE_SERVER), "--port", str(port), *extra]


class FakeBench:
    """Writes a ``bench serve``-shaped result file, built from a real H200 capture with this run's prompt count."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on_call = fail_on_call

    def __call__(self, argv: list[str]) -> dict[str, Any]:
        self.calls.append(argv)
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("bench serve failed (as the test asked)")
        opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        result = json.loads((FIXTURES / "h200-draft-c16" / "bench.json").read_text())
        result["num_prompts"] = int(opt["--num-prompts"])
        result["completed"] = int(opt["--num-prompts"])
        result["max_concurrency"] = int(opt["--max-concurrency"]) if "--max-concurrency" in opt else None
        Path(opt["--result-dir"], opt["--result-filename"]).write_text(json.dumps(result))
        return result
