"""The tests that read the recorded runs pass unchanged on more of them: a copy of data/ with one more repeat of a
recorded point and a new case, appended as the runner appends them (``results.replay.sync_rows``), read through
``VLLM_PLAYBOOKS_DATA_DIR`` by the ``recorded_data`` tests in a pytest of their own (two pytest-xdist workers)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pandas as pd
import pytest

from tests.conftest import ROOT
from vllm_playbooks.paths import DATA_DIR_ENV, data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.identity import point_id
from vllm_playbooks.results.replay import replay_rows, sync_rows
from vllm_playbooks.results.store import case_dir

#: The case that gets one more repeat, and the new case (copied from it: two points and their servers' logs).
CASE, NEW_CASE = "llama-8b-draft-model", "grown-llama-8b"
MARKER = "recorded_data"

pytestmark = pytest.mark.long

#: The recorded_data tests left out of the run on the grown copy, for time: those on the whole ledger build all of its
#: evidence (some ten seconds on two cores), the time-limit one waits out its limit, those on pages executed on fewer
#: rows execute a whole page each (nine pages, minutes). None pins a count, verdict or sentence of the data; the unit
#: suite runs them on data/runs/ as it is (the pages' in ``make test-long``, beside this test).
LEFT_OUT = (
    "tests/unit/book/test_pages_on_fewer_rows.py::test_a_case_page_runs_on_a_quick_checks_rows_alone",
    "tests/unit/book/test_pages_on_fewer_rows.py::test_a_case_page_runs_on_its_quick_part_alone",
    "tests/unit/book/test_pages_on_fewer_rows.py"
    "::test_a_page_showing_every_gpu_heads_with_the_reference_gpus_rows_alone",
    "tests/unit/analysis/test_crossover.py::test_the_case_page_verdict_is_the_ledgers_and_reads_its_point",
    "tests/unit/claims/test_ledger.py::test_the_ledger_covers_every_claim_in_the_file",
    "tests/unit/claims/test_ledger.py::test_source_urls_and_kinds_come_from_published",
    "tests/unit/claims/test_ledger.py::test_the_ledgers_fit_is_the_case_pages_fit",
    "tests/unit/claims/test_ledger.py::test_pp_cap_on_the_recorded_runs",
    "tests/unit/claims/test_ledger.py::test_data_verdicts_rest_on_rows",
    "tests/unit/claims/test_ledger.py::test_the_page_renders_every_claim",
    "tests/unit/claims/test_ledger.py::test_the_export_states_the_noise_each_verdict_rests_on",
    "tests/unit/run/test_parallel.py::test_the_time_limit_interrupts_the_workers_and_keeps_what_they_finished",
)


def _add_point(source: Path, target_case_dir: Path, repeat: int, measured_at: str) -> str:
    """Copy the recorded point folder ``source`` into ``target_case_dir`` as repeat ``repeat`` of the same config and
    load, measured at ``measured_at``, with its ``point.json`` saying so (case, point id, repeat); return its id."""
    point = json.loads((source / raw.POINT_FILE).read_text(encoding="utf-8"))
    hardware, config_id, load_slug = source.parent.parent.name, source.parent.name, raw.split_point_id(source.name)[0]
    pid = point_id(hardware, config_id, load_slug, repeat)
    shutil.copytree(source, raw.raw_root(target_case_dir) / pid)
    point.update(case=target_case_dir.name, point_id=pid, config_id=config_id, repeat=repeat, measured_at=measured_at)
    (raw.raw_root(target_case_dir) / pid / raw.POINT_FILE).write_text(json.dumps(point, indent=2), encoding="utf-8")
    return pid


def _grow(data: Path) -> tuple[str, list[str]]:
    """Add to the data folder ``data`` the next repeat of the last recorded speculative point of ``CASE``, a day
    after its last row, and ``NEW_CASE``: the first point of ``CASE`` with speculation off and the first with it on,
    with the logs of those points' servers; the rows are appended by ``sync_rows``. Return the new point's id and the
    new case's point ids."""
    recorded, rows = case_dir(CASE, data), replay_rows(CASE, data)
    last = max((r for r in rows if r.spec_method != "none"), key=lambda r: r.measured_at)
    later = (pd.Timestamp(max(r.measured_at for r in rows)) + pd.Timedelta(days=1)).isoformat()
    point = raw.split_point_id(last.point_id)[0]
    repeats = [raw.split_point_id(r.point_id)[1] for r in rows if raw.split_point_id(r.point_id)[0] == point]
    added = _add_point(data / last.raw_path, recorded, max(repeats) + 1, later)
    assert sync_rows(CASE, data) == [added]

    new_dir = case_dir(NEW_CASE, data)
    firsts = [
        min((r for r in rows if (r.spec_method == "none") is off), key=lambda r: r.measured_at) for off in (True, False)
    ]
    new = [_add_point(data / r.raw_path, new_dir, 0, r.measured_at) for r in firsts]
    (new_dir / "logs").mkdir()
    configs = {r.config_id for r in firsts}
    for log in (recorded / "logs").iterdir():
        if any(log.name.startswith(f"{config}-") for config in configs):
            shutil.copy2(log, new_dir / "logs" / log.name)
    assert sorted(sync_rows(NEW_CASE, data)) == sorted(new)
    return added, new


def test_the_recorded_data_tests_pass_on_more_recorded_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(data_dir(), data)
    before = len(replay_rows(CASE, data))
    added, new = _grow(data)
    assert len(replay_rows(CASE, data)) == before + 1 and added in {r.point_id for r in replay_rows(CASE, data)}
    assert len(new) == 2 and {r.point_id for r in replay_rows(NEW_CASE, data)} == set(new)
    files = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests" / "unit").rglob("test_*.py")
        if f"pytest.mark.{MARKER}" in p.read_text(encoding="utf-8")
    )
    assert "tests/unit/results/test_recorded_data.py" in files
    for test in LEFT_OUT:  # each still names a marked test (pytest would ignore a stale one)
        path, name = test.split("::")
        assert path in files and f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), test
    deselect = [arg for test in LEFT_OUT for arg in ("--deselect", test)]
    report = tmp_path / "grown.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", f"--junitxml={report}"]
        + ["-m", MARKER, *deselect, *files],
        cwd=ROOT,
        env={**os.environ, DATA_DIR_ENV: str(data)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout.splitlines()[-1]
    ran = {case.get("name", "").split("[")[0] for case in ElementTree.parse(report).iter("testcase")}
    assert ran and not ran & {test.split("::")[1] for test in LEFT_OUT}  # pytest-xdist's summary counts no deselected
