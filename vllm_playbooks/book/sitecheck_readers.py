"""The site check's rules for what a reader trusts at a glance: figures they can read, pages without raw prints, and
tables shown rather than hidden with code (``sitecheck.SiteChecker`` runs ``check_reader_rules`` on every page).

- A figure (a PNG under ``_images/``) must carry the ``figure_record.FigureRecord`` its page saved, its smallest text
  must render at ``MIN_FIGURE_TEXT_PX`` or more (font px in the PNG × rendered width / natural width; a figure inside
  a closed section is taken at the width of the page's main column, where it opens) and no panel may draw more than
  ``MAX_SERIES_PER_PANEL`` series (more go to small multiples).
- Page text (prose and cell outputs, code inputs and literal blocks left out) must hold no raw print: no pandas
  ``Name: …, dtype: …`` line or bare ``dtype: float64``, no run of ``key=value key=value`` words.
- A page's numbered captions ("Fig. 1", "Table 1"; Sphinx's ``.caption-number``) must number each kind from 1 and
  count up by 1 in page order (``figure_numbers`` renumbers Sphinx's book-wide count per page).
- A table must not sit in a code cell hidden whole (``hide-cell``) or by its output (``hide-output``): a reader would
  have to open code to see it. Hide the input (``hide-input``) or put the table in a dropdown (``{glue:}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import UnidentifiedImageError

from vllm_playbooks.book.figure_record import FigureRecord, read_record

if TYPE_CHECKING:
    from collections.abc import Callable

    from selenium.webdriver.chrome.webdriver import WebDriver

MIN_FIGURE_TEXT_PX = 10.0
MAX_SERIES_PER_PANEL = 6
#: Raw prints a reader should never see: a pandas Series' footer, a bare dtype line, ``key=value`` words separated by
#: spaces only (``configs=122 dense=73``; ``PP=1, PP=2`` in a sentence is notation), a keyword given a Python list or
#: dict (``engines=['a'], concurrency=[32]``).
RAW_PRINT_PATTERNS = (
    re.compile(r"\bName: [^\n,]+, dtype: \w+"),
    re.compile(r"^\s*dtype: \w+\s*$", re.MULTILINE),
    re.compile(r"(?<![\w\-./])[A-Za-z_]\w*=[^\s=,;:()]+(?: +[A-Za-z_]\w*=[^\s=,;:()]+)+(?![\w=])"),
    re.compile(r"(?<![\w\-./])[A-Za-z_]\w*=[\[{][^\]}\n]*[\]}]"),
)
#: A caption's number as Sphinx writes it: a kind ("Fig.", "Table") and one whole number (not "3.1": per page).
CAPTION_NUMBER = re.compile(r"(?P<kind>\D*?)\s*(?P<number>\d+)")
#: Cell classes (myst-nb: ``tag_<tag>``) that hide a cell's output behind a "Show code cell …" toggle.
HIDING_TAGS = ("tag_hide-cell", "tag_hide-output")
#: The cell class of a workshop's worked solution (tag ``solution``): folded on purpose, so that a learner opens it
#: only after trying; its tables are exempt from the rule above.
SOLUTION_TAG = "tag_solution"

# Runs in the page: every image under the figure folder with its natural and rendered width; an image with no box
# (inside a closed section) gets the width of the page's main column, where it would open.
_FIGURES_JS = """
const main = document.querySelector("main") || document.body;
const column = (document.querySelector("article") || main).clientWidth;
return Array.from(document.images, img => ({
  src: img.getAttribute("src") || "", url: img.currentSrc || img.src || "", natural: img.naturalWidth,
  rendered: img.getBoundingClientRect().width || Math.min(img.naturalWidth, column),
}));
"""

# Runs in the page: the text a reader reads, as lines: cell outputs (their inline code left out; a plain-text output's
# <pre> kept: that is where a raw print shows), then the prose with code cells, literal blocks and inline code left
# out (a command such as `make reproduce CASE=<case> PARAMS=<params>` is not a print).
_READER_TEXT_JS = """
const main = document.querySelector("main") || document.body;
const outputs = Array.from(main.querySelectorAll(".cell_output"), e => {
  const copy = e.cloneNode(true);
  for (const c of copy.querySelectorAll("code")) c.remove();  // inline code in Markdown output (a command) is code
  return copy.textContent || "";
});
const prose = main.cloneNode(true);
for (const e of prose.querySelectorAll(".cell, pre, code, script, style, .MathJax, .math")) e.remove();
return outputs.concat([prose.textContent || ""]).join("\\n");
"""

# Runs in the page: the caption numbers of its main column, in page order ("Fig. 2", folded sections included).
_CAPTION_NUMBERS_JS = """
const main = document.querySelector("main") || document.body;
return Array.from(main.querySelectorAll(".caption-number"), e => (e.textContent || "").trim());
"""

# Runs in the page: per table inside a cell whose tags hide its output (arguments[0]), not a workshop's solution
# (arguments[1]), the cell's tags and the table's first header.
_HIDDEN_TABLES_JS = """
return Array.from(document.querySelectorAll("table"))
  .map(t => [t, t.closest(".cell")])
  .filter(([t, cell]) => cell && arguments[0].some(tag => cell.classList.contains(tag))
                        && !cell.classList.contains(arguments[1]))
  .map(([t, cell]) => ({tags: Array.from(cell.classList).filter(c => c.startsWith("tag_")).join(" "),
                        header: ((t.querySelector("th") || {}).textContent || "").trim().slice(0, 40)}));
"""


@dataclass(frozen=True)
class ShownFigure:
    """One image a page shows: its file under the site and its natural and rendered widths in px."""

    target: str
    natural_width: float
    rendered_width: float


def figure_problems(record: FigureRecord | None, shown: ShownFigure) -> list[str]:
    """What is wrong with one shown figure, as reasons (none: it passes)."""
    if record is None:
        return ["has no record of its text size: save it through plots.use_book_style (figure_record)"]
    problems = []
    text_px = record.rendered_font_px(shown.rendered_width, shown.natural_width)
    if text_px < MIN_FIGURE_TEXT_PX:
        problems.append(
            f"smallest text renders at {text_px:.1f} px (drawn at {record.min_font_px:g} px, shown "
            f"{shown.rendered_width:.0f} of {shown.natural_width:.0f} px wide; at least {MIN_FIGURE_TEXT_PX:g})"
        )
    if record.max_series > MAX_SERIES_PER_PANEL:
        problems.append(f"a panel draws {record.max_series} series (at most {MAX_SERIES_PER_PANEL}: small multiples)")
    return problems


def raw_prints(text: str) -> list[str]:
    """The raw prints in a page's reader text, in order of ``RAW_PRINT_PATTERNS`` then of the text."""
    return [match.group(0).strip() for pattern in RAW_PRINT_PATTERNS for match in pattern.finditer(text)]


def caption_number_problems(labels: list[str]) -> list[str]:
    """What is wrong with a page's caption numbers (``labels``: "Fig. 1", "Table 1", … in page order), as reasons:
    each kind must start at 1 and count up by 1."""
    problems = []
    last: dict[str, int] = {}
    for label in labels:
        match = CAPTION_NUMBER.fullmatch(label)
        if match is None:
            problems.append(f"caption number {label!r} is not a kind and one whole number")
            continue
        kind, number = match["kind"], int(match["number"])
        previous = last.get(kind, 0)
        if number != previous + 1:
            where = f"follows {kind} {previous}" if previous else f"is the page's first {kind}"
            problems.append(f"caption {label!r} {where}: each page numbers its captions 1, 2, 3, …")
        last[kind] = number
    return problems


def hidden_table_problem(tags: str, header: str) -> str:
    """The failure reason for a table inside a cell whose ``tags`` hide its output."""
    return (
        f"table (first header {header!r}) is inside a '{tags}' cell: a reader must open code to see it; hide "
        f"the input (hide-input), not the output"
    )


def check_reader_rules(
    driver: WebDriver,
    root: Path,
    page: str,
    local_path: Callable[[str], str | None],
    fail: Callable[[str, str, str], None],
) -> None:
    """Run this module's rules on the page open in ``driver``; ``local_path`` maps a URL to its file under ``root``
    (None: not this site), ``fail(page, element, reason)`` records a failure."""
    seen: set[str] = set()
    for number, img in enumerate(driver.execute_script(_FIGURES_JS)):
        target = local_path(img["url"])
        if target is None or not target.startswith("_images/") or target in seen or img["natural"] <= 0:
            continue
        seen.add(target)
        try:
            record = read_record(root / target)
        except (UnidentifiedImageError, OSError):  # not a PNG Pillow reads (an SVG): no record to judge
            continue
        for problem in figure_problems(record, ShownFigure(target, img["natural"], img["rendered"])):
            fail(page, f"<img #{number} src={img['src']!r}>", problem)
    for problem in caption_number_problems(driver.execute_script(_CAPTION_NUMBERS_JS)):
        fail(page, "figure captions", problem)
    for raw in raw_prints(driver.execute_script(_READER_TEXT_JS)):
        fail(page, "page text", f"shows a raw print {raw[:80]!r}: show a sentence or a table")
    for table in driver.execute_script(_HIDDEN_TABLES_JS, list(HIDING_TAGS), SOLUTION_TAG):
        fail(page, "table", hidden_table_problem(table["tags"], table["header"]))
