"""Bad input through the command line, one table: each is refused with exit status 2 and exactly one line on
standard error, ``error: …``, and leaves the data folder byte for byte as it was.

Every command runs as ``python -m vllm_playbooks …`` in a process of its own, on a copy of the repository's data
folder (``VLLM_PLAYBOOKS_DATA_DIR``); a case file given by path is written to a tmp folder first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.faults.conftest import tree_digest, tree_stat
from vllm_playbooks.paths import data_dir

pytestmark = pytest.mark.faults

CASE = "llama-8b-draft-model"
RUN = ["run", "--case", CASE, "--gpus", "0"]
ADVISE_LIVE = ["advise", "--mode", "live", "--case", CASE]

#: A valid case file; each bad one below changes one thing in it.
GOOD = """
case: my-case
title: a case of one's own
engine_defaults:
  model: tiny-llama
  max_model_len: 512
engines:
  - label: spec-off
  - label: ngram-k2
    speculative: {method: ngram, num_speculative_tokens: 2, prompt_lookup_max: 3}
loads:
  input_len: 64
  output_len: 16
  concurrency: [1, 4]
"""


def _with(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


#: Case files given by path: (id, text). Each is tried with check-config and with run.
BAD_CASE_FILES = [
    ("host-equals", _with("max_model_len: 512", 'max_model_len: 512\n  extra_args: ["--host=0.0.0.0"]')),
    ("host-abbreviated", _with("max_model_len: 512", 'max_model_len: 512\n  extra_args: ["--hos", "0.0.0.0"]')),
    ("port", _with("max_model_len: 512", 'max_model_len: 512\n  extra_args: ["--port", "80"]')),
    ("model", _with("max_model_len: 512", 'max_model_len: 512\n  extra_args: ["--model=/elsewhere"]')),
    ("case-escapes", _with("case: my-case", "case: ../../escaped")),
    ("case-absolute", _with("case: my-case", "case: /tmp/escaped")),
    ("bool-concurrency", _with("[1, 4]", "[1, true, 4]")),
    ("nan-concurrency", _with("[1, 4]", "[1, .nan]")),
    ("negative-concurrency", _with("[1, 4]", "[-4]")),
    ("duplicate-loads", _with("[1, 4]", "[4, 4]")),
    ("unknown-shape", _with("model: tiny-llama", "model: no-such-shape")),
    ("zero-draft-tokens", _with("num_speculative_tokens: 2", "num_speculative_tokens: 0")),
    ("unknown-method", _with("method: ngram", "method: telepathy")),
    ("sampling-in-spec", _with("prompt_lookup_max: 3", "prompt_lookup_max: 3, temperature: 0.5")),
    ("unknown-key", GOOD + "colour: blue\n"),
    (
        "no-engines",
        _with(
            """engines:
  - label: spec-off
  - label: ngram-k2
    speculative: {method: ngram, num_speculative_tokens: 2, prompt_lookup_max: 3}
""",
            "engines: []\n",
        ),
    ),
    ("duplicate-labels", _with("label: ngram-k2", "label: spec-off")),
    ("not-yaml", "case: [unclosed\n"),
    ("not-a-mapping", "- just\n- a list\n"),
    ("empty-file", ""),
    (
        "alias-bomb-in-title",
        _with(
            "title: a case of one's own",
            "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
            + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
            + "title: *a8",
        ),
    ),
    ("nested-too-deep", GOOD + "title2: " + "[" * 200 + "]" * 200 + "\n"),
    ("huge-title", _with("title: a case of one's own", "title: " + "x" * 100_000)),
    ("huge-draft-length", _with("num_speculative_tokens: 2", "num_speculative_tokens: 1.0e+9")),
    ("billion-repeats", GOOD + "repeats: 1000000000\n"),
    ("billion-clients", _with("[1, 4]", "[1, 1000000000]")),
    ("parts-a-number", GOOD + "parts: 7\n"),
]

#: Command lines: (id, argv).
BAD_COMMANDS = [
    ("run-unknown-case", ["run", "--case", "no-such-case", "--gpus", "0"]),
    ("run-case-path-escape", ["run", "--case", "../../etc", "--gpus", "0"]),
    ("run-case-file-missing", ["run", "--case", "/nonexistent/case.yaml", "--gpus", "0"]),
    ("run-gpu-twice", [*RUN[:-1], "0", "0"]),
    ("run-empty-gpu", [*RUN[:-1], ",1"]),
    ("run-time-limit-nan", [*RUN, "--time-limit-s", "nan"]),
    ("run-time-limit-negative", [*RUN, "--time-limit-s", "-5"]),
    ("run-time-limit-inf", [*RUN, "--time-limit-s", "inf"]),
    ("run-concurrency-zero", [*RUN, "--concurrency", "0"]),
    ("run-concurrency-word", [*RUN, "--concurrency", "true"]),
    ("run-repeats-zero", [*RUN, "--repeats", "0"]),
    ("run-unknown-part", [*RUN, "--part", "9-nothing"]),
    ("run-unknown-engine", [*RUN, "--engines", "no-such-engine"]),
    ("run-no-case", ["run", "--gpus", "0"]),
    ("run-gpus-and-ray", [*RUN, "--ray", "auto"]),
    ("run-ray-nobody-there", ["run", "--case", CASE, "--ray", "127.0.0.1:1"]),
    ("plan-unknown-case", ["plan", "--case", "no-such-case"]),
    ("plan-budget-negative", ["plan", "--case", CASE, "--budget-s", "-1"]),
    ("plan-unknown-part", ["plan", "--case", CASE, "--part", "9-nothing"]),
    ("check-config-unknown-case", ["check-config", "no-such-case"]),
    ("check-config-unknown-parameter", ["check-config", CASE, "-p", "no_such_parameter", "1"]),
    ("check-config-unknown-part", ["check-config", CASE, "--part", "9-nothing"]),
    ("ledger-unknown-format", ["ledger", "--format", "xml"]),
    ("runs-unknown-case", ["runs", "no-such-case"]),
    ("runs-path-escape", ["runs", "../.."]),
    ("migrate-unknown-case", ["migrate", "no-such-case"]),
    ("compress-missing-folder", ["compress", "/nonexistent/folder"]),
    ("unknown-command", ["no-such-command"]),
    ("advise-live-no-budget", [*ADVISE_LIVE, "--slo-tpot-p99-ms", "8"]),
    ("advise-live-no-slo", [*ADVISE_LIVE, "--budget-gpu-min", "20"]),
    ("advise-live-budget-negative", [*ADVISE_LIVE, "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "-20"]),
    ("advise-live-hardware", [*ADVISE_LIVE, "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20", "--hardware", "x"]),
    ("advise-live-gpu-twice", [*ADVISE_LIVE, "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20", "--gpus", "0,0"]),
    (
        "advise-live-two-grids",
        ["advise", "--mode", "live", "--case", "gpt-oss-eagle3", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20"],
    ),
    (
        "advise-live-no-such-length",
        [*ADVISE_LIVE, "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20", "--input-len", "7"],
    ),
]

#: check-config FILE and run --case FILE for each bad case file, then the command lines.
CASES = [
    pytest.param(["check-config", "{file}"], text, id=f"check-config-file-{name}") for name, text in BAD_CASE_FILES
]
CASES += [
    pytest.param(["run", "--case", "{file}", "--gpus", "0"], text, id=f"run-file-{name}")
    for name, text in BAD_CASE_FILES
]
CASES += [pytest.param(argv, None, id=name) for name, argv in BAD_COMMANDS]


@pytest.fixture(scope="module")
def data_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the repository's data folder, which the commands get as theirs; once they have all run, its every
    byte is as it was (each test checks path, size and time of every entry, ``tree_stat``)."""
    copy = tmp_path_factory.mktemp("bad-input") / "data"
    shutil.copytree(data_dir(), copy, symlinks=True)
    before = tree_digest(copy)
    yield copy
    assert tree_digest(copy) == before


def test_there_are_at_least_forty_bad_inputs() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("argv", "case_file"), CASES)
def test_bad_input_is_refused_in_one_line_and_changes_nothing(
    argv: list[str], case_file: str | None, data_copy: Path, tmp_path: Path
) -> None:
    if case_file is not None:
        path = tmp_path / "my-case.yaml"
        path.write_text(textwrap.dedent(case_file))
        argv = [str(path) if a == "{file}" else a for a in argv]
    before = tree_stat(data_copy)
    # warnings (advice on valid settings, e.g. what a speculative method turns off) are not what is tested here
    env = {**os.environ, "VLLM_PLAYBOOKS_DATA_DIR": str(data_copy), "TMPDIR": str(tmp_path), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert tree_stat(data_copy) == before
    assert not list(tmp_path.glob("*-parallel-*"))  # no worker was started
