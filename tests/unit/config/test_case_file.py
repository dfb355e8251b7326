"""A structurally wrong case file is a ``ConfigError`` (one ``error: …`` line, exit status 2), never a traceback,
and the file is left as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllm_playbooks import cli
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import load_plan, plan_from_dict

ENGINE = {"label": "off", "model": "tiny-llama", "max_model_len": 512}
LOADS = {"input_len": 8, "output_len": 8, "concurrency": [1]}
GOOD: dict[str, Any] = {"case": "t", "engines": [ENGINE], "loads": LOADS}

PAIRS = [["method", "ngram"], ["num_speculative_tokens", 2]]
#: (id, changes to GOOD): each leaves the case's structure wrong in one place.
WRONG = [
    # a list of pairs that dict() would have read as a valid config
    ("speculative-pairs", {"engines": [{**ENGINE, "speculative": PAIRS}]}),
    ("speculative-list-of-words", {"engines": [{**ENGINE, "speculative": ["ngram", 2]}]}),
    ("default-speculative-list", {"engine_defaults": {"speculative": ["ngram"]}}),
    ("engines-mapping", {"engines": {"off": ENGINE}}),
    ("engines-null", {"engines": None}),
    ("engine-entry-list", {"engines": [["label", "off"]]}),
    ("engine-entry-word", {"engines": ["off"]}),
    ("engine-env-list", {"engines": [{**ENGINE, "env": ["A=1"]}]}),
    ("engine-defaults-list", {"engine_defaults": [["model", "tiny-llama"]]}),
    ("engine-defaults-word", {"engine_defaults": "tiny-llama"}),
    ("loads-list-of-words", {"loads": ["c1", "c4"]}),
    ("loads-list-of-numbers", {"loads": [1, 4]}),
    ("loads-word", {"loads": "c1"}),
    ("loads-number", {"loads": 4}),
    ("loads-empty-list", {"loads": []}),  # a plan of no point (found by make test-faults' property test)
    ("parts-list-of-words", {"parts": ["quick"]}),
]


@pytest.mark.parametrize("changes", [pytest.param(c, id=name) for name, c in WRONG])
def test_a_wrong_structure_is_a_config_error(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        plan_from_dict({**GOOD, **changes})


@pytest.mark.parametrize("spec", [["case", "t"], "t", None])
def test_a_case_that_is_no_mapping_is_a_config_error(spec: Any) -> None:
    with pytest.raises(ConfigError):
        plan_from_dict(spec)


def _check_config(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        status = cli.main(["check-config", str(path)])
    except SystemExit as stopped:
        status = stopped.code  # type: ignore[assignment]
    return status, capsys.readouterr().err


WRONG_FILES = [
    ("speculative-list", "  - label: off\n    speculative: [ngram, 2]\n"),
    ("engine-entry-list", "  - [label, off]\n"),
    ("engines-mapping", "  off: {label: off}\n"),
]


@pytest.mark.parametrize("engines", [pytest.param(e, id=name) for name, e in WRONG_FILES])
def test_a_wrong_case_file_is_one_line_and_exit_status_2(
    engines: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.yaml"
    text = (
        "case: mine\nengine_defaults: {model: tiny-llama, max_model_len: 512}\nengines:\n"
        + engines
        + "loads: {input_len: 8, output_len: 8, concurrency: [1]}\n"
    )
    path.write_text(text, encoding="utf-8")
    status, err = _check_config(path, capsys)
    assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert path.read_text(encoding="utf-8") == text


def test_a_case_file_that_is_not_utf8_is_one_line_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.yaml"
    data = "case: mine\ntitle: caf\u00e9\n".encode("latin-1") + b"\xff\xfe\n"
    path.write_bytes(data)
    with pytest.raises(ConfigError):
        load_plan(str(path))
    status, err = _check_config(path, capsys)
    assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert path.read_bytes() == data


def test_the_good_case_still_plans() -> None:
    assert [e.label for e in plan_from_dict(GOOD).engines] == ["off"]


@pytest.mark.parametrize("shape", ["relative", "absolute"])
def test_a_case_name_with_path_segments_loads_no_yaml_outside_the_package(
    shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    from importlib import resources

    outside = tmp_path / "x" / "some.yaml"
    outside.parent.mkdir()
    text = (
        "case: some\nengines: [{label: base, model: tiny-llama, max_model_len: 512}]\n"
        "loads: {input_len: 8, output_len: 8, concurrency: [1]}\n"
    )
    outside.write_text(text, encoding="utf-8")
    cases = Path(str(resources.files("vllm_playbooks.cases")))
    stem = str(outside.with_suffix(""))
    name = os.path.relpath(stem, cases) if shape == "relative" else stem
    with pytest.raises(ConfigError):
        load_plan(name)
    try:
        status = cli.main(["check-config", name])
    except SystemExit as stopped:
        status = stopped.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert outside.read_text(encoding="utf-8") == text
    # the same file given by its path, as a case file of one's own, is read
    assert [e.label for e in load_plan(str(outside)).engines] == ["base"]
