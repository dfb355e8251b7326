"""Bad notebook parameters reach the user of ``vllm-playbooks reproduce`` (``make reproduce``) as one line,
``error: …``, with exit status 2, before any work, and leave the data folder as it was."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vllm_playbooks import cli

#: (notebook, parameters, what the one line says): replay mode, so no GPU is needed. The data folder is the frozen
#: copy of some recorded runs (``tests/fixtures/recorded``): it holds no llama-8b-draft-model rows, deepseek-mtp rows
#: at 1, 4 and 8 QPS of two engines, discussion-13834 rows at concurrency 1 and pp-27462 rows at each engine's own.
BAD = [
    ("llama-8b-draft-model", ["case", "nope"], "Unknown case 'nope'. Known: deepseek-mtp"),
    ("llama-8b-draft-model", ["engines", '["nope"]'], "no engine config named ['nope']; known: ['spec-off'"),
    ("llama-8b-draft-model", ["bogus", "1"], "unknown parameter(s) ['bogus']; this notebook takes: mode, case"),
    ("llama-8b-draft-model", ["mode", "Replay"], "mode must be 'replay' or 'live', got 'Replay'"),
    ("llama-8b-draft-model", ["concurrency", "[0]"], "bad load {'concurrency': 0}"),
    ("llama-8b-draft-model", ["concurrency", "[2]"], "no recorded row at concurrency [2]; recorded: none"),
    ("llama-8b-draft-model", ["concurrency", "[1, 16"], "parameter concurrency: cannot read '[1, 16' as YAML"),
    ("llama-8b-draft-model", ["model", "nope-shape"], "'nope-shape' is neither a known shape nor an existing"),
    ("llama-8b-draft-model", ["draft_model", "nope"], "'nope' is neither a known shape nor an existing directory"),
    ("llama-8b-draft-model", ["min_duration_s", "-1"], "min_duration_s must be a number > 0 and <= 86400, got -1"),
    ("llama-8b-draft-model", ["gpu_memory_gib", "-3"], "gpu_memory_gib must be a number > 0, got -3"),
    ("llama-8b-draft-model", ["gpu_memory_gib", "8"], "engine spec-off: weights"),
    ("llama-8b-draft-model", ["part", "nope"], "no part 'nope'; known: all, quick"),
    ("gpt-oss-eagle3", ["profiles", '["nope"]'], "no load profile named ['nope']; known: ['chat', 'swe']"),
    ("gpt-oss-eagle3", ["concurrency", '["a"]'], "bad load {'concurrency': 'a'}"),
    ("gpt-oss-eagle3", ["part", "nope"], "no part 'nope'; known: 1-verdict, 2-k-sweep"),
    ("deepseek-mtp", ["request_rate_qps", "[3]"], "no recorded row at request rate [3]; recorded: [1, 4, 8]"),
    ("deepseek-mtp", ["engines", '["mimo-spec-off"]'], "no recorded row at engine ['mimo-spec-off']"),
    ("deepseek-mtp", ["load_format", "auto"], "unknown parameter(s) ['load_format']"),
    ("discussion-13834", ["concurrency", "[64]"], "no recorded row at concurrency [64]; recorded: [1]"),
    ("discussion-13834", ["hardware", "NVIDIA H20"], "no rows recorded on hardware 'NVIDIA H20'; recorded: NVIDIA"),
    ("pp-27462", ["concurrency", "[100]"], "no recorded row at concurrency [100]; recorded: [64, 128, 256, 512]"),
    ("pp-27462", ["hardware", "NVIDIA A100-SXM4-80GB"], "no rows recorded on hardware 'NVIDIA A100-SXM4-80GB'"),
]


def _digest(folder: Path) -> str:
    """One digest of every file's path and bytes under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _one_error_line(text: str) -> str:
    """The single line of ``text``, which must be ``error: …``."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def test_there_are_at_least_fifteen_bad_parameters() -> None:
    assert len(BAD) >= 15 and len({(nb, tuple(p)) for nb, p, _ in BAD}) == len(BAD)


@pytest.mark.parametrize(("notebook", "parameter", "says"), BAD, ids=[f"{nb}-{p[0]}" for nb, p, _ in BAD])
def test_a_bad_parameter_is_one_line_and_exit_2(
    notebook: str, parameter: list[str], says: str, frozen_data: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = _digest(frozen_data)
    argv = [
        "reproduce",
        "--case",
        notebook,
        "--out",
        str(tmp_path / "out.ipynb"),
        "-p",
        "mode",
        "replay",
        "-p",
        *parameter,
    ]
    if parameter[0] == "mode":
        argv = ["reproduce", "--case", notebook, "--out", str(tmp_path / "out.ipynb"), "-p", *parameter]
    assert cli.main(argv) == 2
    out, err = capfd.readouterr()
    assert says in _one_error_line(out + err)
    assert _digest(frozen_data) == before
    assert not (tmp_path / "out.ipynb").exists()  # refused before a kernel started


def test_an_error_raised_inside_the_notebook_is_one_line(
    frozen_data: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A parameter only the page itself checks (``max_num_seqs`` of the #27462 page): the kernel raises
    ``ConfigError`` and the command prints its message, not papermill's traceback."""
    before = _digest(frozen_data)
    out_path = tmp_path / "out.ipynb"
    argv = [
        "reproduce",
        "--case",
        "pp-27462",
        "--out",
        str(out_path),
        "-p",
        "mode",
        "replay",
        "-p",
        "max_num_seqs",
        "[7]",
    ]
    assert cli.main(argv) == 2
    out, err = capfd.readouterr()
    line = _one_error_line(out + err)
    assert "case pp-27462: no engine has max_num_seqs in [7]" in line and str(out_path) in line
    assert _digest(frozen_data) == before


def test_the_command_line_prints_nothing_but_the_line(frozen_data: Path) -> None:
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "vllm_playbooks", "reproduce", "--case", "llama-8b-draft-model", "-p", "case", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert _one_error_line(done.stderr).startswith("error: Unknown case 'nope'")


def test_live_mode_without_vllm_is_one_line_before_any_work(
    frozen_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    assert cli.main(["reproduce", "--case", "llama-8b-draft-model", "--out", str(tmp_path / "out.ipynb")]) == 2
    out, err = capfd.readouterr()
    assert "live mode needs vLLM in this Python environment" in _one_error_line(out + err)
    assert not (tmp_path / "out.ipynb").exists()


def test_live_mode_without_a_gpu_is_one_line_before_any_work(
    frozen_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr("vllm_playbooks.run.case.query_gpus", lambda: ("cpu", 0, "none", None))
    assert cli.main(["reproduce", "--case", "llama-8b-draft-model", "--out", str(tmp_path / "out.ipynb")]) == 2
    out, err = capfd.readouterr()
    assert "live mode needs an NVIDIA GPU, and this machine shows none" in _one_error_line(out + err)
    assert not (tmp_path / "out.ipynb").exists()
