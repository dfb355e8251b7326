"""A Sphinx extension that numbers each page's figures from 1 (``_config.yml``: ``sphinx: extra_extensions``).

Sphinx (``numfig``, on in Jupyter Book) keeps one counter per kind of figure for the whole book unless the toctree is
numbered: it walks the documents in toctree order and counts on, so the third case page started at "Fig. 9", and
``numfig: false`` only drops the numbers. A numbered toctree would prefix them with chapter numbers ("Fig. 3.1")
instead. After Sphinx's toctree collector has counted (``env-get-updated``, default priority 500), this extension
renumbers ``env.toc_fignumbers`` within each document, in the order Sphinx counted them; the HTML captions and every
``{numref}`` read that mapping, so they stay in step (a ``{numref}`` to another page names that page's number).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sphinx.application import Sphinx
    from sphinx.environment import BuildEnvironment

#: After Sphinx's own ``env-get-updated`` handlers (priority 500), so the toctree collector has counted already.
PRIORITY = 900


def per_page_numbers(numbers: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """One page's numbers of one kind of figure (figure id to its book-wide number), renumbered 1, 2, … in the order
    they were counted."""
    return {figure_id: (position,) for position, figure_id in enumerate(numbers, start=1)}


def number_per_page(app: Sphinx, env: BuildEnvironment) -> list[str]:
    """Renumber every document's figures from 1 (an ``env-get-updated`` handler). It names no document to rewrite:
    a page's own numbers change only with its figures, and then Sphinx rereads it."""
    env.toc_fignumbers = {
        docname: {figtype: per_page_numbers(numbers) for figtype, numbers in kinds.items()}
        for docname, kinds in env.toc_fignumbers.items()
    }
    return []


def setup(app: Sphinx) -> dict[str, object]:
    """Register the renumbering with Sphinx."""
    app.connect("env-get-updated", number_per_page, priority=PRIORITY)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
