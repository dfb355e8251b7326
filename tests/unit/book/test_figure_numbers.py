"""The figure_numbers extension on a two-page Sphinx project: each page's figures number from 1, {numref} follows."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image
from sphinx.application import Sphinx

from vllm_playbooks.book.figure_numbers import per_page_numbers

PAGE = """{title}
=====

.. figure:: dot.png
   :name: {name}-a

   First of {name}.

.. figure:: dot.png
   :name: {name}-b

   Second of {name}.

See :numref:`{other}-b`.
"""


def test_per_page_numbers_keep_the_counted_order() -> None:
    assert per_page_numbers({"x": (9,), "y": (10,), "z": (11,)}) == {"x": (1,), "y": (2,), "z": (3,)}
    assert per_page_numbers({}) == {}


def test_each_page_numbers_its_figures_from_one(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    Image.new("RGB", (4, 4), "red").save(source / "dot.png")
    (source / "index.rst").write_text(".. toctree::\n\n   one\n   two\n", encoding="utf-8")
    (source / "one.rst").write_text(PAGE.format(title="One", name="one", other="two"), encoding="utf-8")
    (source / "two.rst").write_text(PAGE.format(title="Two", name="two", other="one"), encoding="utf-8")
    overrides = {"extensions": ["vllm_playbooks.book.figure_numbers"], "numfig": True}
    out = tmp_path / "html"
    app = Sphinx(source, None, out, tmp_path / "doctrees", "html", overrides, status=None, warningiserror=True)
    app.build()
    for page in ("one", "two"):
        html = (out / f"{page}.html").read_text(encoding="utf-8")
        assert re.findall(r'caption-number">Fig\. (\d+)', html) == ["1", "2"]
        assert re.search(r'<span class="std std-numref">Fig\. 2</span>', html)
