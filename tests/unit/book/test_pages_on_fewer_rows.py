"""Case pages executed on fewer rows than the book's grid: another GPU's quick check alone (what a re-run in a data
folder of its own shows; the book's H100 rows are such a quick check, with no grid, schedule or control runs), and
each case's quick part alone (what `make reproduce CASE=<page> PARAMS="-p part quick"` executes after measuring).

Each test executes a whole case page, tens of seconds: they run in ``make test-long`` (``.ci/run --full``), not ``make
test``."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"
OTHER_GPU = "NVIDIA H100 80GB HBM3"

pytestmark = pytest.mark.long


def _glued(notebook: nbformat.NotebookNode, name: str, kind: str = "text/plain") -> str:
    """What a page glued under ``name``, as ``kind`` (papermill records plain text as a repr)."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return str(output["data"][f"application/papermill.record/{kind}"]).strip("'\"")
    raise KeyError(name)


@pytest.mark.recorded_data
@pytest.mark.parametrize("page", ["discussion-13834", "load-desync"])
def test_a_case_page_runs_on_a_quick_checks_rows_alone(page: str, tmp_path: Path) -> None:
    import papermill

    out = tmp_path / f"{page}.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOKS / f"{page}.ipynb"),
        str(out),
        parameters={"hardware": OTHER_GPU},
        cwd=str(NOTEBOOKS),
        progress_bar=False,
    )
    executed = nbformat.read(out, as_version=4)
    assert _glued(executed, "rows_hardware") == f"{OTHER_GPU} (1 GPU per server), vLLM 0.26.0"
    if page == "discussion-13834":  # the rule's parts a quick check cannot give say so instead of failing
        assert all(re.fullmatch(r"—|\d+", _glued(executed, part)) for part in ("gains_up_to", "loses_from"))
        assert "no schedule was measured on this GPU" in _glued(executed, "schedule_shortfall")
    else:  # the opening is the H100's own, and the reference GPU's rows become another GPU's paragraph
        assert re.fullmatch(r"[+-]\d+\.\d %", _glued(executed, "gain_varied"))
        assert _glued(executed, "other_gpus_paragraphs", "text/markdown").startswith("**On NVIDIA H200.**")


@pytest.mark.recorded_data
@pytest.mark.parametrize(
    "page", ["discussion-13834", "llama-8b-draft-model", "load-desync", "gpt-oss-eagle3", "pp-27462"]
)
def test_a_case_page_runs_on_its_quick_part_alone(page: str, tmp_path: Path) -> None:
    """What `make reproduce CASE=<page> PARAMS="-p part quick"` executes after measuring: the page on the quick
    part's points only. A range or a rule over the grid that those rows cannot give says so instead of failing.
    (The Llama page's quick part names a config not measured yet: the page shows the other two. DeepSeek's quick part
    runs a shape of which no row is recorded: replay refuses it, ``tests/unit/run/test_case.py``.)"""
    import papermill

    out = tmp_path / f"{page}.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOKS / f"{page}.ipynb"), str(out), parameters={"part": "quick"}, cwd=str(NOTEBOOKS), progress_bar=False
    )
    executed = nbformat.read(out, as_version=4)
    assert "NVIDIA H200" in _glued(executed, "rows_hardware")


@pytest.mark.recorded_data
@pytest.mark.parametrize("page", ["llama-8b-draft-model", "gpt-oss-eagle3"])
def test_a_page_showing_every_gpu_heads_with_the_reference_gpus_rows_alone(page: str, tmp_path: Path) -> None:
    """`-p hardware all` puts the H100's rows beside the H200's; the opening's numbers stay the H200's, and the H100
    gets its own paragraph instead of being mixed into them."""
    import papermill

    from vllm_playbooks.analysis import compare
    from vllm_playbooks.analysis.runs import rows_on_hardware
    from vllm_playbooks.cases.results import results_for

    out = tmp_path / f"{page}.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOKS / f"{page}.ipynb"),
        str(out),
        parameters={"hardware": "all"},
        cwd=str(NOTEBOOKS),
        progress_bar=False,
    )
    executed = nbformat.read(out, as_version=4)
    assert OTHER_GPU in _glued(executed, "rows_hardware")  # the page shows both GPUs' rows
    if page == "llama-8b-draft-model":
        reference = rows_on_hardware(results_for("llama-8b-draft-model", "replay"), "NVIDIA H200", "replay")
        assert _glued(executed, "lead_gpu") == "NVIDIA H200"
        assert _glued(executed, "loads") == str(len(compare.versus_baseline(reference, "output_tok_s")))
        assert _glued(executed, "other_gpus") == OTHER_GPU
    else:
        sentences = [
            output["data"]["text/markdown"]
            for cell in executed.cells
            for output in cell.get("outputs", [])
            if "changed output throughput against speculation off" in output.get("data", {}).get("text/markdown", "")
        ]
        assert sentences and all(s.startswith("On NVIDIA H200,") and OTHER_GPU not in s for s in sentences)
        assert _glued(executed, "other_gpus_paragraphs", "text/markdown").startswith(f"**On {OTHER_GPU}.**")
