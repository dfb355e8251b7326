"""The reader rules (vllm_playbooks.book.sitecheck_readers) in headless Chromium, on a small site written here: a
figure shrunk until its text is under 10 px, a raw print in a cell output, a table in a hidden cell; the same site
made right passes (its search aside: it has none), with a command in inline code in an output and a table in a
workshop's folded solution."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

from vllm_playbooks.book.browser import CHROMEDRIVER, CHROMIUM
from vllm_playbooks.book.figure_record import figure_png
from vllm_playbooks.book.sitecheck import check_site

matplotlib.use("Agg")
import matplotlib.pyplot as plt

browser = pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()), reason="no chromium/chromedriver")


def _site(root: Path, img_width: int, output: str, cell_tags: str) -> Path:
    (root / "_images").mkdir(parents=True)
    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    ax.plot([1, 2], [1, 2])
    ax.tick_params(labelsize=10)  # 13.9 px in the PNG
    (root / "_images" / "fig.png").write_bytes(figure_png(fig))
    plt.close(fig)
    table = "<table><thead><tr><th>config</th></tr></thead><tbody><tr><td>1</td></tr></tbody></table>"
    (root / "index.html").write_text(
        "<html><head><title>t</title></head><body><main><article>"
        f'<img src="_images/fig.png" style="width:{img_width}px">'
        f'<div class="cell docutils container"><div class="cell_output"><pre>{output}</pre></div></div>'
        f'<div class="cell {cell_tags} docutils container"><div class="cell_output">{table}</div></div>'
        "</article></main></body></html>"
    )
    return root


@pytest.mark.site
@browser
def test_reader_rules_fail_each_breakage_and_pass_the_right_site(tmp_path: Path) -> None:
    broken = check_site(_site(tmp_path / "broken", 150, "Name: implied, dtype: float64", "tag_hide-cell"))
    reasons = [f.reason for f in broken.failures]
    assert any("smallest text renders at" in r for r in reasons)
    assert any("raw print 'Name: implied, dtype: float64'" in r for r in reasons)
    assert any("'tag_hide-cell' cell" in r for r in reasons)
    fine = check_site(
        _site(
            tmp_path / "fine",
            400,
            "1.97× at 8 QPS <code>run(engines=['a'], qps=[1, 8])</code>",
            "tag_hide-cell tag_solution",
        )
    )  # a command in inline code; a workshop's folded solution
    others = [f for f in fine.failures if not f.page.startswith("search.html")]  # the small site has no search
    assert not others, "\n".join(map(str, others))
