"""The built book in headless Chromium (vllm_playbooks.book.sitecheck): a fresh build passes, a broken copy fails.

The book is the test run's one build (tests/conftest.py: ``built_book``). A check of the whole book takes tens of
seconds, so one copy of it is broken in every way at once, each breakage on a page or element of its own; what needs
no book is checked on a small site written here. The browser tests skip only when /usr/bin/chromium or
/usr/bin/chromedriver is missing (.ci/site-check-setup.sh installs both)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from PIL import Image

from vllm_playbooks import cli
from vllm_playbooks.book import sitecheck
from vllm_playbooks.book.browser import CHROMEDRIVER, CHROMIUM, is_blank_image
from vllm_playbooks.book.sitecheck import check_site

_missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
browser = pytest.mark.skipif(
    bool(_missing), reason=f"{' and '.join(_missing)} not installed (bash .ci/site-check-setup.sh installs them)"
)
CASE_PAGES = ("book/executed/llama-8b-draft-model.html", "book/executed/discussion-13834.html")


@pytest.fixture(scope="module")
def built_site(built_book: Path) -> Path:
    """``_build/html`` of the session's fresh build of the book (tests/conftest.py)."""
    return built_book / "_build" / "html"


@pytest.fixture
def site_copy(built_site: Path, tmp_path: Path) -> Path:
    """A throw-away copy of the built site, for a test to break."""
    return Path(shutil.copytree(built_site, tmp_path / "html"))


# --- no browser needed -------------------------------------------------------------------------------------------


def _png(path: Path, size: tuple[int, int], colour: tuple[int, int, int, int], dot: bool = False) -> Path:
    img = Image.new("RGBA", size, colour)
    if dot:
        img.putpixel((size[0] // 2, size[1] // 2), (255, 0, 0, 255))
    img.save(path)
    return path


def test_a_page_the_build_does_not_hold_is_refused_in_one_line_before_the_browser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "index.html").write_text("<html><head><title>t</title></head><body></body></html>")
    missing = tmp_path / "no-chromium"
    argv = ["site-check", str(tmp_path), "--page", "index.html", "--page", "gone.html", "--chromium", str(missing)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: site-check: no page gone.html in ")


def test_blank_image_is_one_colour_or_fully_transparent(tmp_path: Path) -> None:
    assert is_blank_image(_png(tmp_path / "white.png", (40, 30), (255, 255, 255, 255)))
    assert is_blank_image(_png(tmp_path / "clear.png", (40, 30), (0, 0, 0, 0)))
    assert not is_blank_image(_png(tmp_path / "dot.png", (40, 30), (255, 255, 255, 255), dot=True))
    assert not is_blank_image((tmp_path / "dot.png").read_bytes())


def test_pages_leave_out_static_and_sources(tmp_path: Path) -> None:
    for rel in ("index.html", "book/a.html", "_static/x.html", "_sources/book/a.html", "search.html"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<html></html>")
    assert sitecheck.list_pages(tmp_path) == ["book/a.html", "index.html", "search.html"]


def test_missing_browser_is_reported_not_crashed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "index.html").write_text("<html></html>")
    assert cli.main(["site-check", str(tmp_path), "--chromium", str(tmp_path / "no-chromium")]) == 2
    assert "no-chromium not found" in capsys.readouterr().err


# --- in the browser ----------------------------------------------------------------------------------------------


@pytest.mark.site
@pytest.mark.slow
@browser
def test_fresh_build_passes_the_site_check(built_site: Path, tmp_path: Path) -> None:
    shots = tmp_path / "shots"
    report = check_site(built_site, screenshots=shots)
    assert report.ok, "\n".join(map(str, report.failures))
    assert {"index.html", "book/intro.html", *CASE_PAGES} <= set(report.pages)
    assert "search.html" not in report.pages and "genindex.html" not in report.pages
    assert len(report.figures) >= 2 and all(f.startswith("_images/") for f in report.figures)
    assert report.internal_links > len(report.pages)
    assert report.search_ok and report.search_results >= 1
    names = {p.name for p in report.screenshots}
    executed = {p.name.removesuffix(".html") for p in (built_site / "book" / "executed").glob("*.html")}
    assert names == {"index.png", *(f"book_executed_{n}.png" for n in executed)}
    for shot in report.screenshots:
        with Image.open(shot) as img:
            assert img.format == "PNG" and img.width >= 800 and img.height >= 600
    assert {*CASE_PAGES, "book/executed/claims_ledger.html"} <= set(report.heights)
    assert all(0 < height <= sitecheck.MAX_PAGE_HEIGHT_PX for height in report.heights.values())
    assert re.fullmatch(r"site-check: \d+ pages, \d+ figures, \d+ internal links, search ok", report.summary())


def _first_figure(html: Path, page: str) -> Path:
    """The file of the first figure ``page`` shows."""
    match = re.search(r'<img[^>]+src="((?:\.\./)*_images/[^"]+)"', (html / page).read_text())
    assert match, f"{page} shows no figure"
    return (html / page).parent / match.group(1)


def _remove_image(html: Path) -> tuple[str, str]:
    _first_figure(html, CASE_PAGES[0]).unlink()
    return CASE_PAGES[0], "does not load in the browser"


def _blank_png(html: Path) -> tuple[str, str]:
    figure = _first_figure(html, CASE_PAGES[1])
    with Image.open(figure) as img:
        size = img.size
    Image.new("RGB", size, (255, 255, 255)).save(figure)
    return CASE_PAGES[1], "is blank: every pixel is one colour"


def _retarget_link(html: Path, new_target: str) -> str:
    """Point the first link of book/intro.html that still goes to mtp.html at ``new_target``."""
    page = html / "book" / "intro.html"
    text, count = re.subn(r'href="mtp\.html"', f'href="{new_target}"', page.read_text(), count=1)
    assert count == 1, "book/intro.html has no (more) link to mtp.html to break"
    page.write_text(text)
    return "book/intro.html"


def _broken_link(html: Path) -> tuple[str, str]:
    return _retarget_link(html, "mtp-gone.html"), "book/mtp-gone.html does not exist"


def _broken_fragment(html: Path) -> tuple[str, str]:
    return _retarget_link(html, "mtp.html#no-such-section"), "no element id='no-such-section' on book/mtp.html"


def _no_mathjax(html: Path) -> tuple[str, str]:
    shutil.rmtree(html / "mathjax")
    return "book/speculative-decoding.html", "formula(s) still show TeX source"


def _insert_into_case_page(html: Path, fragment: str) -> str:
    page = CASE_PAGES[0]
    text = (html / page).read_text()
    assert text.count("</main>") == 1, f"{page} has no single <main> to add to"
    (html / page).write_text(text.replace("</main>", fragment + "</main>"))
    return page


def _missing_cell(html: Path) -> tuple[str, str]:
    table = "<table><thead><tr><th>a</th></tr></thead><tbody><tr><td>NaN</td></tr></tbody></table>"
    return _insert_into_case_page(html, table), "cell(s) read ['NaN']"


def _index_column(html: Path) -> tuple[str, str]:
    table = "<table><thead><tr><th></th><th>a</th></tr></thead><tbody><tr><th>0</th><td>1</td></tr></tbody></table>"
    return _insert_into_case_page(html, table), "shows a pandas index"


def _object_repr(html: Path) -> tuple[str, str]:
    return _insert_into_case_page(html, "<p>&lt;IPython.core.display.Markdown object&gt;</p>"), "an output with no HTML"


def _tall_page(html: Path) -> tuple[str, str]:
    return _insert_into_case_page(html, f'<div style="height:{sitecheck.MAX_PAGE_HEIGHT_PX}px"></div>'), "page height"


#: Ways to break a built site, each on a page or element of its own, so that one broken copy holds them all: each
#: returns the page whose failure line must name it and what that line must say.
BREAKAGES = (
    _remove_image,
    _blank_png,
    _broken_link,
    _broken_fragment,
    _no_mathjax,
    _missing_cell,
    _index_column,
    _object_repr,
    _tall_page,
)


@pytest.mark.site
@pytest.mark.slow
@browser
def test_broken_copy_fails_naming_page_and_element_of_each_breakage(
    site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One check of a copy broken in every way of ``BREAKAGES`` at once (a full check of the book takes tens of
    seconds), searched for a word no page holds: each breakage, and the empty search, gets its own failure line. Only
    the broken pages are opened (``--page``), and the page the broken fragment points to, whose ids are read."""
    expected = [breakage(site_copy) for breakage in BREAKAGES]
    pages = sorted({page for page, _ in expected} | {"book/mtp.html"})
    expected.append(("search.html?q=zqxjvwk", "#search-results: no result for 'zqxjvwk'"))
    only = [arg for page in pages for arg in ("--page", page)]
    assert cli.main(["site-check", str(site_copy), "--query", "zqxjvwk", *only]) == 1
    out = capsys.readouterr()
    failures = [line for line in out.err.splitlines() if line.startswith("site-check FAIL ")]
    for page, reason in expected:
        assert any(line.startswith(f"site-check FAIL {page}: ") and reason in line for line in failures), reason
    assert "did not match any documents" in out.err
    assert re.search(rf"^site-check: {len(pages)} pages, ", out.out, re.MULTILINE)
    assert out.out.splitlines()[-1].endswith(f"search FAILED, {len(failures)} failure(s)")


@pytest.mark.site
@pytest.mark.slow
@browser
def test_screenshot_starts_at_the_page_left_edge(tmp_path: Path) -> None:
    # The whole page sits in a container that scrolls sideways (as a wide table can make a theme's main column do),
    # with an image at its far right: the image check scrolls the container, and the shot must undo that.
    site = tmp_path / "html"
    site.mkdir()
    _png(site / "far.png", (40, 30), (0, 0, 255, 255))
    (site / "index.html").write_text(
        '<html><head><title>t</title></head><body style="margin:0">'
        '<div style="overflow-x:auto;width:100%"><div style="width:4000px;height:700px;position:relative">'
        '<div style="position:absolute;left:0;top:0;width:60px;height:60px;background:#ff0000"></div>'
        '<img src="far.png" alt="far" style="position:absolute;left:3900px;top:300px"></div></div></body></html>'
    )
    shots = tmp_path / "shots"
    check_site(site, screenshots=shots)  # no search page here: only the screenshot matters
    with Image.open(shots / "index.png") as img:
        assert img.convert("RGB").getpixel((20, 20)) == (255, 0, 0)


@pytest.mark.site
@browser
def test_a_site_without_its_search_index_fails_without_waiting_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "html"
    site.mkdir()
    for page in ("index.html", "search.html"):  # a search page whose index was never written
        (site / page).write_text(f"<html><head><title>{page}</title></head><body><p>{page}</p></body></html>")
    assert cli.main(["site-check", str(site)]) == 1
    out = capsys.readouterr()
    failures = [line for line in out.err.splitlines() if line.startswith("site-check FAIL ")]
    assert len(failures) == 1 and failures[0].startswith("site-check FAIL search.html?q=speculative: "), out.err
    assert "searchindex.js does not exist" in failures[0]
    assert out.out.splitlines()[-1].endswith("search FAILED, 1 failure(s)")
