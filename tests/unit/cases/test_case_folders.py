"""A case is one folder: listing the folders finds every case, a case's files agree on its one name, and a new
folder with a notebook appears in `plan`, the ledger and the book's table of contents with no other file edited."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from tests.conftest import ROOT
from vllm_playbooks import cases
from vllm_playbooks.book.toc import CASES_CAPTION, book_toc, case_pages
from vllm_playbooks.claims.loading import load_claims
from vllm_playbooks.config import case_file
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import load_plan


def test_every_folder_is_a_case_whose_files_use_its_one_name() -> None:
    names = case_file.case_names()
    assert {"discussion-13834", "deepseek-mtp", "gpt-oss-eagle3", "pp-27462", "rules-of-thumb"} <= set(names)
    for case in case_file.grid_names():
        spec = yaml.safe_load(case_file.grid_file(case).read_text(encoding="utf-8"))
        assert spec["case"] == case  # the grid, the folder and the data folder (data/runs/<case>) agree
        assert (ROOT / "notebooks" / f"{case}.ipynb").is_file(), case  # and its page
    assert "rules-of-thumb" not in case_file.grid_names()  # claims without a grid


def test_an_unknown_case_or_a_path_is_refused_naming_the_cases() -> None:
    with pytest.raises(ConfigError, match=r"Unknown case .discussion_13834.\. Known: deepseek-mtp, discussion-13834"):
        case_file.case_folder("discussion_13834")  # the package's spelling is not the case's name
    with pytest.raises(ConfigError, match="not a case name"):
        case_file.case_folder("../cases/pp_27462")
    with pytest.raises(ConfigError, match="'rules-of-thumb' has no grid to measure"):
        load_plan("rules-of-thumb")


def test_the_checks_are_found_in_the_case_folders_and_each_claim_names_one() -> None:
    found = cases.checks()
    assert found["pp_cap_starves_stages"] is cases.case_module("pp-27462").pp_cap_starves_stages
    evidence = cases.load_evidence(ROOT / "tests" / "fixtures" / "recorded")
    assert {claim.check for claim in load_claims()} == set(found)
    assert evidence.check("acceptance_bands") is found["acceptance_bands"]


def test_the_cases_page_order_sets_the_table_of_contents() -> None:
    pages = case_pages(ROOT)
    assert pages[:2] == ["discussion-13834", "llama-8b-draft-model"] and set(pages) == set(case_file.grid_names())
    part = next(p for p in book_toc(ROOT)["parts"] if p["caption"] == CASES_CAPTION)
    assert part["chapters"] == [{"file": f"book/executed/{case}"} for case in pages]


# --------------------------------------------------------------------------------------------------------------
# A new case: one folder and one notebook
# --------------------------------------------------------------------------------------------------------------

SYNTHETIC = "synthetic-case"
GRID = {
    "case": SYNTHETIC,
    "title": "A synthetic case",
    "page_order": 50,
    "engine_defaults": {"model": "llama-3.1-8b", "max_model_len": 2048, "max_num_seqs": 16},
    "engines": [
        {"label": "spec-off"},
        {"label": "ngram-k3", "speculative": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}},
    ],
    "loads": [{"input_len": 256, "output_len": 64, "concurrency": [1, 4]}],
}
CHECK = '''"""A synthetic case: one check that says what its claim's published number is."""
from vllm_playbooks.claims.claim import CheckResult, Claim, Evidence, check


@check("synthetic_claim_holds")
def synthetic_claim_holds(claim: Claim, evidence: Evidence) -> CheckResult:
    """Not measured: the published gain, as the source states it."""
    return CheckResult(published=f"gain {evidence.value(claim, 'synthetic-gain'):g}", measured="", rows=0,
                       verdict="not measured yet")
'''


def _csv(columns: list[str], row: dict[str, str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)
    return buffer.getvalue()


def _add_synthetic_case(repo: Path) -> None:
    folder = repo / "vllm_playbooks" / "cases" / SYNTHETIC.replace("-", "_")
    folder.mkdir()
    (folder / "__init__.py").write_text(CHECK, encoding="utf-8")
    (folder / "case.yaml").write_text(yaml.safe_dump(GRID, sort_keys=False), encoding="utf-8")
    (folder / "published.csv").write_text(
        _csv(
            [
                "claim_id",
                "quantity",
                "setting",
                "value",
                "unit",
                "source_url",
                "source_title",
                "source_date",
                "secondary_only",
                "note",
            ],
            {
                "claim_id": "synthetic-gain",
                "quantity": "speedup",
                "setting": "ngram k=3",
                "value": "1.5",
                "unit": "x",
                "source_url": "https://example.org/synthetic",
                "source_title": "A synthetic source",
                "source_date": "2026-12",
                "secondary_only": "false",
                "note": "",
            },
        ),
        encoding="utf-8",
    )
    (folder / "claims.csv").write_text(
        _csv(
            ["claim", "text", "sources", "check"],
            {
                "claim": "synthetic-claim",
                "text": "ngram speculation gains 1.5x.",
                "sources": "synthetic-gain",
                "check": "synthetic_claim_holds",
            },
        ),
        encoding="utf-8",
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A synthetic case")])
    nbformat.write(notebook, repo / "notebooks" / f"{SYNTHETIC}.ipynb")


def _command(repo: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(repo), "VLLM_PLAYBOOKS_DATA_DIR": str(repo / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_a_new_case_folder_and_notebook_appear_in_plan_ledger_and_contents(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "vllm_playbooks", repo / "vllm_playbooks", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "notebooks").mkdir()
    (repo / "data" / "reference").mkdir(parents=True)
    shutil.copy(ROOT / "data" / "reference" / "hardware.csv", repo / "data" / "reference")
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, repo / name)
    _add_synthetic_case(repo)

    plan = _command(repo, "plan", "--case", SYNTHETIC, "--gpu", "NVIDIA H100 80GB HBM3")
    assert "spec-off" in plan and "ngram-k3" in plan and "4 run(s) to measure" in plan
    ledger = list(csv.DictReader(io.StringIO(_command(repo, "ledger", "--format", "csv"))))
    line = next(row for row in ledger if row["claim_id"] == "synthetic-claim")
    assert line["verdict"] == "not measured yet"
    _command(repo, "toc", "--out", "_build/_toc.yml")
    toc = yaml.safe_load((repo / "_build" / "_toc.yml").read_text(encoding="utf-8"))
    part = next(p for p in toc["parts"] if p["caption"] == CASES_CAPTION)
    assert part["chapters"] == [{"file": f"book/executed/{SYNTHETIC}"}]  # the only case with a notebook here
