"""Property-based tests (hypothesis): generated case files, parameter lists and import folders, from well-formed to
hostile. Each ends in a plan (or an import) or in one ``ConfigError``/``PlaybookError``, never another exception,
within 2 s and 200 MB, leaving the data folder as it was. In-process for speed; a small subprocess sample proves the
command line's contract (exit 0, or one ``error:`` line and exit 2) end to end.

``HYPOTHESIS_EXAMPLES`` (default 700 per property, 2 100 in all) sets the run's size: ``make test-faults
HYPOTHESIS_EXAMPLES=20000`` for a long one."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.faults.conftest import tree_digest
from vllm_playbooks.errors import PlaybookError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.run.import_check import check_source_case
from vllm_playbooks.run.plan import load_plan, parse_parameter_pairs

pytestmark = pytest.mark.faults

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "700"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    # CI draws the same inputs every run, so a submission's verdict does not depend on the draw; a run elsewhere
    # explores new ones each time
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LIMIT_S, LIMIT_BYTES = 2.0, 200 * 2**20
CASE = "llama-8b-draft-model"
#: The figures of this run, printed at its end (the README's Reliability section states them).
FIGURES: dict[str, Any] = {"inputs": 0, "refused": 0, "slowest_s": 0.0, "peak_mib": 0.0}

GOOD: dict[str, Any] = {
    "case": "my-case",
    "title": "a case of one's own",
    "engine_defaults": {"model": "tiny-llama", "max_model_len": 512},
    "engines": [
        {"label": "spec-off"},
        {"label": "ngram-k2", "speculative": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}},
    ],
    "loads": {"input_len": 64, "output_len": 16, "concurrency": [1, 4]},
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        [
            "tiny-llama",
            "ngram",
            "eagle3",
            "draft_model",
            "mtp",
            "../../etc",
            "1e9",
            "spec-off",
            "-1",
            ".nan",
            "auto",
            "dummy",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20,
)
KEYS = [
    "case",
    "title",
    "engine_defaults",
    "engines",
    "loads",
    "repeats",
    "min_duration_s",
    "parts",
    "paired",
    "gpu_memory_gib",
    "model",
    "max_model_len",
    "speculative",
    "num_speculative_tokens",
    "concurrency",
    "label",
    "input_len",
    "output_len",
    "request_rate_qps",
    "method",
    "max_num_seqs",
    "max_num_batched_tokens",
]
PATHS = [(), ("engine_defaults",), ("loads",), ("engines", 0), ("engines", 1), ("engines", 1, "speculative")]


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)
    ]
    return "case: my-case\n" + "\n".join(lines) + f"\ntitle: *a{levels - 1}\n"


@st.composite
def case_texts(draw: st.DrawFn) -> str:
    """A case file's text: the good one with a few values changed (anywhere, to anything), or raw hostile text."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "raw", "hostile"]))
    if kind == "raw":
        return draw(st.text(max_size=300))
    if kind == "hostile":
        return draw(
            st.sampled_from(
                [
                    _bomb(draw(st.integers(2, 12))),
                    "case: x\nt: " + "[" * draw(st.integers(1, 3000)) + "\n",
                    "case: x\ntitle: " + "y" * draw(st.integers(0, 40_000)) + "\n",
                    "case: x\nt: *nope\n",
                    "case: x\n" + "k: &k [1]\n" * 3 + "\x00",
                    yaml.safe_dump(GOOD) + "\n... \n---\ncase: y\n",
                ]
            )
        )
    spec = yaml.safe_load(yaml.safe_dump(GOOD))
    for _ in range(draw(st.integers(1, 3))):
        where: Any = spec
        for step in draw(st.sampled_from(PATHS)):
            where = (
                where[step]
                if (isinstance(where, dict) and step in where)
                or (isinstance(where, list) and isinstance(step, int) and step < len(where))
                else where
            )
        if isinstance(where, dict):
            where[draw(st.sampled_from(KEYS))] = draw(values)
    return yaml.safe_dump(spec, allow_unicode=True)


def _bounded(call: Any, *args: Any) -> Any:
    """``call(*args)``: its value or None when refused with a PlaybookError; any other exception fails the test, and
    so does more than LIMIT_S seconds or LIMIT_BYTES of Python memory."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return call(*args)
    except PlaybookError as error:
        assert "\n" not in " ".join(str(error).splitlines())
        FIGURES["refused"] += 1
        return None
    finally:
        elapsed, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        FIGURES["inputs"] += 1
        FIGURES["slowest_s"] = max(FIGURES["slowest_s"], elapsed)
        FIGURES["peak_mib"] = max(FIGURES["peak_mib"], peak / 2**20)
        assert elapsed < LIMIT_S, f"{elapsed:.2f} s"
        assert peak < LIMIT_BYTES, f"{peak / 2**20:.0f} MiB"


@pytest.fixture(scope="module", autouse=True)
def report_figures() -> Any:
    """Print what this module's run tried once it ends (``-s`` shows it): inputs, refusals, the slowest, the peak."""
    yield
    print(f"\nproperty figures: {FIGURES}")


@pytest.fixture(scope="module")
def own_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("own") / "my-case.yaml"


@SETTINGS
@given(text=case_texts())
def test_generated_case_files_plan_or_are_refused(text: str, own_file: Path) -> None:
    own_file.write_text(text, encoding="utf-8", errors="surrogatepass")
    plan = _bounded(load_plan, str(own_file))
    assert plan is None or plan.points()


ARG_NAMES = [
    "concurrency",
    "engines",
    "repeats",
    "max_model_len",
    "input_len",
    "output_len",
    "model",
    "paired",
    "min_duration_s",
    "gpu_memory_utilization",
    "request_rate_qps",
    "profiles",
    "tensor_parallel_size",
]


@SETTINGS
@given(
    pairs=st.lists(
        st.tuples(
            st.sampled_from(ARG_NAMES),
            st.one_of(
                st.text(max_size=30),
                st.sampled_from(
                    [
                        "[1, 16]",
                        "[0]",
                        "1e9",
                        "1000000000",
                        "[spec-off]",
                        "null",
                        "true",
                        "[1, 2, 3",
                        "&a [*a]",
                        "-1",
                        ".inf",
                        "'x'",
                        "{a: 1}",
                    ]
                ),
            ),
        ),
        max_size=4,
    )
)
def test_generated_notebook_parameters_plan_or_are_refused(pairs: list[tuple[str, str]]) -> None:
    def plan() -> Any:
        return load_plan(CASE, **parse_parameter_pairs([list(pair) for pair in pairs]))

    _bounded(plan)


@pytest.fixture(scope="module")
def recorded_points() -> list[Path]:
    return raw.finished_points(data_dir() / "runs" / CASE)[:2]


DAMAGES = ["none", "truncate", "empty", "junk", "drop", "symlink", "case", "label", "failure-junk", "failure-ok"]
FILES = [raw.POINT_FILE, raw.PROVENANCE_FILE, raw.BENCH_FILE, "metrics_before.prom.gz", "metrics_after.prom.gz"]


@SETTINGS
@given(damages=st.lists(st.tuples(st.sampled_from(DAMAGES), st.sampled_from(FILES), st.integers(0, 4000)), max_size=3))
@example(damages=[("symlink", "point.json", 0), ("drop", "point.json", 0)])  # the link gone again: no point left
@example(damages=[("symlink", "bench.json", 1), ("junk", "bench.json", 9)])  # junk written through the link
def test_generated_import_folders_are_checked_whole(
    damages: list[tuple[str, str, int]], recorded_points: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    source = tmp_path_factory.mktemp("source")
    case_root = source / "runs" / CASE
    points = []
    for point in recorded_points:
        target = raw.raw_root(case_root) / point.relative_to(raw.raw_root(data_dir() / "runs" / CASE))
        shutil.copytree(point, target)
        points.append(target)
    linked: set[Path] = set()  # files replaced by a link (a later damage of the same file may remove the link)
    outside = source / "outside.txt"  # what a link points at: beside the case folder, not in it
    outside.write_text("not a point's file")
    damaged: set[Path] = set()  # points damaged in a way that must be refused while they still have a point.json
    failures: dict[Path, bool] = {}  # each failure file written, and whether its last writing left it well-formed
    for damage, name, cut in damages:
        path = points[cut % len(points)] / name
        point_json = path.parent / raw.POINT_FILE
        if damage == "truncate" and path.exists():
            path.write_bytes(path.read_bytes()[: cut % max(1, path.stat().st_size)])
        elif damage == "empty" and path.exists():
            path.write_bytes(b"")
        elif damage == "junk" and path.exists():
            path.write_bytes(os.urandom(cut % 64))
        elif damage == "drop":
            if path.exists() and name != raw.POINT_FILE:
                damaged.add(path.parent)
            path.unlink(missing_ok=True)
        elif damage == "symlink" and path.exists():
            path.unlink()
            path.symlink_to(outside)  # a later damage of the file writes through the link: to a file of ours
            linked.add(path)
        elif damage in ("case", "label") and point_json.exists() and not point_json.is_symlink():
            text = point_json.read_text(errors="replace")
            old, new = (f'"{CASE}"', '"discussion-13834"') if damage == "case" else ('"label": "', '"label": "../')
            if old in text:
                damaged.add(path.parent)
            point_json.write_text(text.replace(old, new, 1))
        elif damage.startswith("failure"):
            record = '{"point_id": "%s", "error": "e"}' % path.parent.relative_to(raw.raw_root(case_root)).as_posix()
            failure = path.parent.with_name(path.parent.name + raw.FAILURE_SUFFIX)
            failure.write_text(record if damage == "failure-ok" else record[: cut % len(record)])
            failures[failure] = damage == "failure-ok"  # a later damage of the same file replaces an earlier one
    must_refuse = any(path.is_symlink() for path in linked)  # a damage the check has to catch: a link left
    must_refuse |= any((point / raw.POINT_FILE).is_file() for point in damaged)  # else the folder is no point
    must_refuse |= not all(failures.values())
    clean = all(damage in ("none", "failure-ok") for damage, _, _ in damages)
    checked = _bounded(lambda: check_source_case(CASE, case_root) or True)
    assert checked is (None if must_refuse else True) or not (must_refuse or clean)
    shutil.rmtree(source)


SAMPLE = [
    (["check-config", CASE], 0),
    (["check-config", CASE, "-p", "concurrency", "[1, 1000000000]"], 2),
    (["check-config", CASE, "-p", "concurrency", "&a [*a, *a]"], 2),
    (["plan", "--case", "../../x"], 2),
    (["run", "--case", CASE, "--gpus", "0", "--repeats", "1000000000"], 2),
    (["import-runs", "/nonexistent"], 2),
    (["check-config", CASE, "-p", "repeats", "1000000000"], 2),
    (["runs", "--no-such-flag"], 2),
]


@pytest.mark.parametrize(("argv", "code"), SAMPLE)
def test_the_command_line_keeps_the_contract_end_to_end(argv: list[str], code: int, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(data_dir() / "runs" / CASE, data / "runs" / CASE)
    before = tree_digest(data)
    env = {**os.environ, "VLLM_PLAYBOOKS_DATA_DIR": str(data), "PYTHONWARNINGS": "ignore"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code, done.stderr
    if code == 2:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    assert tree_digest(data) == before
    assert time.perf_counter() - started < 30
    usage = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert usage < 1024 * 1024  # KiB: below 1 GiB for the interpreter and pandas
