"""Check the built book as a reader sees it: every page, link, figure and the search, in headless Chromium.

``vllm-playbooks site-check _build/html --screenshots _build/site-check`` is what ``make site-check`` runs.

The HTML folder is served over ``http://127.0.0.1:<free port>`` (as GitHub Pages serves it: static files, no
server logic) and opened in Debian's headless Chromium, driven by Selenium with the system ``chromedriver`` (nothing is
downloaded: the driver path is passed and ``SE_OFFLINE=true``). Every other host name is made unresolvable
(``--host-resolver-rules``), so the check is the same with or without a network and proves the search works offline.

What fails the check, each failure naming its page and element:

- a page that does not load (every ``*.html`` except ``_static/``, ``_sources/``; ``genindex.html`` and
  ``search.html`` are opened and link-checked but not counted as pages);
- an internal ``<a href>`` (one that resolves to this site) whose file does not exist, or whose ``#fragment`` names
  no element on the target page (checked against the live DOM of every page opened); any ``file://`` link, which
  cannot work once published; a local stylesheet or script that does not exist;
- an ``<img>`` that does not load in the browser (``img.complete && img.naturalWidth > 0`` after it is scrolled into
  view), and a figure (an image under ``_images/``) whose pixels are all one colour (Pillow, on the file);
- ``search.html?q=<query>`` showing no result (Sphinx's search is JavaScript over ``searchindex.js``);
- a formula (Sphinx's ``.math`` elements) still showing its TeX source ``\\(…\\)`` or ``\\[…\\]`` after
  ``MATH_WAIT_S`` seconds: MathJax (served from ``mathjax/``) did not load or did not typeset it;
- a screenshot (the index page and every page under ``book/executed/``) that is all one colour;
- page text that is a Python object's repr (``<IPython.core.display.Markdown object>``, ``<… object at 0x…>``):
  an output that has no HTML or Markdown form, shown as its repr instead;
- a table cell that reads ``NaN``, ``nan``, ``None``, ``<NA>`` or ``NaT``, or a table whose body rows start with a
  header cell (a pandas index shown);
- a page (``genindex.html`` and ``search.html`` aside) whose rendered height, at the window's 1400 px width with
  every collapsed section closed, is above ``MAX_PAGE_HEIGHT_PX``;
- what ``sitecheck_readers`` refuses: figure text under 10 px as rendered, more than 6 series in a panel, raw prints
  in the page text, a table shown only by opening a code cell, figure numbers that do not run 1, 2, … on a page.

``--page PAGE`` (repeatable) opens only the pages named, as the paths ``site-check`` lists them under (e.g.
``book/executed/deepseek-mtp.html``), and the search: a link to a page not opened is checked for its file only, not
its ``#fragment``. A page the build does not hold is refused before the browser starts.

It prints ``site-check: N pages, M figures, L internal links, search ok`` (L counts ``<a href>`` occurrences that
resolve to this site, navigation included; M counts distinct ``_images/`` files that pages show) and exits 1 on any
failure, 2 when Chromium or chromedriver is missing. The browser, and what it measures of a page as drawn (height,
screenshot, a single-colour image), is ``book.browser``; this module is the crawler.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from PIL import UnidentifiedImageError
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from vllm_playbooks import paths
from vllm_playbooks.book import answerleaks
from vllm_playbooks.book.browser import (
    CHROMEDRIVER,
    CHROMIUM,
    SiteCheckError,
    chromium,
    is_blank_image,
    page_height,
    save_screenshot,
    serve,
    wait_ready,
)
from vllm_playbooks.book.sitecheck_readers import check_reader_rules
from vllm_playbooks.errors import ConfigError

SKIPPED_DIRS = ("_static", "_sources")
NOT_COUNTED = ("genindex.html", "search.html")
#: How long a page may take to typeset its formulas before the raw TeX left on it counts as a failure.
MATH_WAIT_S = 15.0
#: Formulas (Sphinx wraps each in a ``.math`` element) whose visible text is still TeX source, not typeset output.
_RAW_MATH_JS = r"""
return Array.from(document.querySelectorAll(".math"))
  .filter(e => /\\\(|\\\[/.test(e.innerText || "")).length;
"""
FIGURE_DIR = "_images"
SCREENSHOT_PAGES = ("index.html", "book/executed/*.html")
#: Every page is measured: a reader should get through one in about five screens, with its collapsed sections closed.
MAX_PAGE_HEIGHT_PX = 9000
#: Runs in the page: the reprs of Python objects in the page's visible text (an output shown as its repr).
_REPRS_JS = r"""
const text = (document.querySelector("main") || document.body).innerText || "";
return text.match(/<[A-Za-z_][\w.]* object(?: at 0x[0-9a-fA-F]+)?>/g) || [];
"""
#: What a table cell must never read: missing values as pandas prints them.
MISSING_CELL_TEXTS = ("NaN", "nan", "None", "<NA>", "NaT")


# Runs in the page: the links listed under the sidebar captions named in arguments[0].
_CAPTION_PAGES_JS = """
const out = [];
for (const caption of document.querySelectorAll("p.caption")) {
  if (!arguments[0].includes(caption.textContent.trim())) continue;
  let list = caption.nextElementSibling;
  while (list && list.tagName !== "UL") list = list.nextElementSibling;
  if (list) for (const a of list.querySelectorAll(":scope > li > a[href]")) out.push(a.href);
}
return out;
"""

# Runs in the page: per table, the cells whose whole text is one of arguments[0], and whether a body row starts
# with a header cell (the index pandas prints).
_TABLES_JS = """
return Array.from(document.querySelectorAll("table"), t => ({
  missing: Array.from(t.querySelectorAll("td, th"), c => (c.textContent || "").trim())
    .filter(text => arguments[0].includes(text)),
  index: Array.from(t.querySelectorAll("tbody > tr"))
    .some(r => r.firstElementChild && r.firstElementChild.tagName === "TH"),
}));
"""
NON_NAVIGATING_SCHEMES = ("mailto", "javascript", "data", "tel", "blob")

# Runs in the page: scroll every image into view, wait for it (lazy ones included), report what the browser got.
_IMAGES_JS = """
const done = arguments[arguments.length - 1];
(async () => {
  const out = [];
  for (const [i, img] of Array.from(document.images).entries()) {
    img.scrollIntoView({block: "center"});
    if (!img.complete) {
      await new Promise(r => {
        img.addEventListener("load", r); img.addEventListener("error", r); setTimeout(r, 5000);
      });
    }
    out.push({index: i, src: img.getAttribute("src") || "", url: img.currentSrc || img.src || "",
              alt: img.getAttribute("alt") || "", complete: img.complete, width: img.naturalWidth});
  }
  window.scrollTo(0, 0);
  done(out);
})();
"""

# Runs in the page: its anchors (raw and resolved href), element ids, local assets and its meta-refresh target.
_PAGE_JS = """
const ids = Array.from(document.querySelectorAll("[id]"), e => e.id)
  .concat(Array.from(document.querySelectorAll("a[name]"), e => e.getAttribute("name")));
const links = Array.from(document.querySelectorAll("a[href]"),
  a => ({href: a.getAttribute("href"), url: a.href, text: (a.textContent || "").trim().slice(0, 60)}));
const assets = Array.from(document.querySelectorAll("link[rel~=stylesheet][href], script[src]"),
  e => ({href: e.getAttribute("href") || e.getAttribute("src"), url: e.href || e.src}));
return {ids: ids, links: links, assets: assets, title: document.title, url: location.href};
"""


@dataclass(frozen=True)
class Failure:
    """One problem: the page it is on, the element (or URL) concerned, and what is wrong."""

    page: str
    element: str
    reason: str

    def __str__(self) -> str:
        return f"{self.page}: {self.element}: {self.reason}"


@dataclass
class SiteReport:
    """What the check saw; ``ok`` when nothing failed."""

    pages: list[str] = field(default_factory=list)
    figures: set[str] = field(default_factory=set)
    internal_links: int = 0
    external_links: int = 0
    search_results: int = 0
    screenshots: list[Path] = field(default_factory=list)
    #: rendered height in px of each page (``NOT_COUNTED`` aside)
    heights: dict[str, int] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the check found nothing wrong."""
        return not self.failures

    @property
    def search_ok(self) -> bool:
        """True when the search page showed at least one result and raised nothing."""
        return self.search_results > 0 and not any(f.page.startswith("search.html") for f in self.failures)

    def summary(self) -> str:
        """``site-check: N pages, M figures, L internal links, search ok`` (plus the failure count, if any)."""
        line = (
            f"site-check: {len(self.pages)} pages, {len(self.figures)} figures, {self.internal_links} internal links, "
            f"search {'ok' if self.search_ok else 'FAILED'}"
        )
        return line if self.ok else f"{line}, {len(self.failures)} failure(s)"


def list_pages(root: Path) -> list[str]:
    """Every ``*.html`` under ``root`` except ``_static/`` and ``_sources/``, as sorted POSIX paths relative to it."""
    pages = []
    for path in root.rglob("*.html"):
        rel = path.relative_to(root)
        if rel.parts[0] not in SKIPPED_DIRS:
            pages.append(rel.as_posix())
    return sorted(pages)


def _local_path(url: str, base: str) -> str | None:
    """The site-relative file a URL on the local server points to (``dir/`` means ``dir/index.html``), else None."""
    if not url.startswith(base):
        return None
    path = unquote(urlsplit(url).path).lstrip("/")
    return path + "index.html" if path == "" or path.endswith("/") else path


def _meta_refresh_target(html: str) -> str | None:
    pattern = r"""<meta[^>]+http-equiv=["']?refresh["']?[^>]*content=["'][^"']*url=([^"'>]+)"""
    match = re.search(pattern, html, re.IGNORECASE)
    return match.group(1).strip() if match else None


@dataclass
class _Link:
    page: str
    href: str
    text: str
    target: str
    fragment: str


class SiteChecker:
    """Runs the check over one built HTML folder; ``run()`` returns a ``SiteReport``."""

    def __init__(
        self,
        root: Path,
        screenshots: Path | None = None,
        query: str = "speculative",
        chromium_path: Path = CHROMIUM,
        chromedriver_path: Path = CHROMEDRIVER,
        offline: bool = True,
        only: tuple[str, ...] = (),
    ) -> None:
        self.root = root.resolve()
        self.only = only
        self.screenshots = screenshots
        self.query = query
        self.chromium_path = chromium_path
        self.chromedriver_path = chromedriver_path
        self.offline = offline
        self.report = SiteReport()
        self._ids: dict[str, set[str]] = {}
        self._links: list[_Link] = []
        self._base = ""

    def fail(self, page: str, element: str, reason: str) -> None:
        """Record one failure."""
        self.report.failures.append(Failure(page, element, reason))

    def run(self) -> SiteReport:
        """Open every page, then check links, figures, search and screenshots."""
        if not (self.root / "index.html").is_file():
            raise SiteCheckError(f"{self.root / 'index.html'} not found: build the book first (make book)")
        pages = list_pages(self.root)
        unknown = [page for page in self.only if page not in pages]
        if unknown:
            raise SiteCheckError(f"no page {unknown[0]} in {self.root} (pages are named as in {pages[0]})")
        if self.only:
            pages = [page for page in pages if page in self.only]
        self.report.pages = [p for p in pages if p not in NOT_COUNTED]
        screenshot_pages = {p for p in pages for pattern in SCREENSHOT_PAGES if Path(p).match(pattern)}
        if self.screenshots is not None:
            self.screenshots.mkdir(parents=True, exist_ok=True)
            for old in self.screenshots.glob("*.png"):
                old.unlink()
        with serve(self.root) as base, chromium(self.chromium_path, self.chromedriver_path, self.offline) as driver:
            self._base = base
            for page in pages:
                self._check_page(driver, base, page, screenshot=page in screenshot_pages)
            self._check_answer_leaks(driver, base, pages)
            self._check_search(driver, base)
        self._check_links()
        return self.report

    def _check_page(self, driver: WebDriver, base: str, page: str, screenshot: bool) -> None:
        source = (self.root / page).read_text(encoding="utf-8", errors="replace")
        refresh = _meta_refresh_target(source)
        try:
            driver.get(base + page)
        except WebDriverException as exc:  # TimeoutException included
            first_line = (exc.msg or "").splitlines()[0] if exc.msg else ""
            self.fail(page, "page", f"did not load: {type(exc).__name__}: {first_line}")
            return
        if refresh is not None:  # a redirect page (index.html): check its target, then follow it as a reader would
            self._add_link(page, refresh, base + str(Path(page).parent / refresh).removeprefix("./"), "meta refresh")
            deadline = time.monotonic() + 10
            while driver.current_url.rstrip("/") == (base + page).rstrip("/") and time.monotonic() < deadline:
                time.sleep(0.05)
        wait_ready(driver)
        info = driver.execute_script(_PAGE_JS)
        here = _local_path(info["url"], base) or page
        if refresh is None or here == page:
            self._ids[page] = set(info["ids"])
        else:
            self._ids.setdefault(here, set(info["ids"]))
        if not info["title"].strip():
            self.fail(page, "<title>", "page has no title")
        if refresh is None:
            for link in info["links"]:
                self._add_link(page, link["href"], link["url"], link["text"])
            for asset in info["assets"]:
                target = _local_path(asset["url"], base)
                if asset["url"].startswith("file:"):
                    self.fail(page, f"asset {asset['href']!r}", "file:// URL will not work once published")
                elif target is not None and not (self.root / target).is_file():
                    self.fail(page, f"asset {asset['href']!r}", f"{target} does not exist")
            self._check_images(driver, base, page)
            self._check_math(driver, page)
            self._check_tables(driver, page)
            self._check_reprs(driver, page)
            check_reader_rules(driver, self.root, page, lambda url: _local_path(url, base), self.fail)
            if page not in NOT_COUNTED:
                self._check_height(driver, page)
        if screenshot and self.screenshots is not None:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", page.removesuffix(".html")) + ".png"
            data = save_screenshot(driver, self.screenshots / name)
            self.report.screenshots.append(self.screenshots / name)
            if is_blank_image(data):
                self.fail(page, f"screenshot {name}", "the rendered page is a single colour")

    def _check_answer_leaks(self, driver: WebDriver, base: str, pages: list[str]) -> None:
        """No workshop answer where a learner reads before trying (``book.answerleaks``), the exercises read from the
        notebooks of the repository holding the site, else of the one the check runs in (a site copied elsewhere)."""
        try:
            repo = paths.find_repo_root(self.root)
        except ConfigError:
            repo = paths.find_repo_root()
        forms = answerleaks.exercise_forms(repo / "notebooks")
        cases = self._caption_pages(driver, base, ("Cases",))
        for leak in answerleaks.find_leaks(driver, base, pages, cases, forms):
            self.fail(leak.page, leak.where, f"shows exercise {leak.exercise}'s answer {', '.join(leak.forms)}")

    def _caption_pages(self, driver: WebDriver, base: str, captions: tuple[str, ...]) -> set[str]:
        """The site-relative pages the sidebar lists under ``captions``, read from the root page."""
        root = "index.html"
        target = _meta_refresh_target((self.root / root).read_text(encoding="utf-8", errors="replace"))
        driver.get(base + (target.removeprefix("./") if target else root))
        wait_ready(driver)
        urls = driver.execute_script(_CAPTION_PAGES_JS, list(captions))
        return {path for url in urls if (path := _local_path(url.split("#", 1)[0], base)) is not None}

    def _check_tables(self, driver: WebDriver, page: str) -> None:
        for number, table in enumerate(driver.execute_script(_TABLES_JS, list(MISSING_CELL_TEXTS)), start=1):
            if table["missing"]:
                self.fail(page, f"table {number}", f"cell(s) read {sorted(set(table['missing']))}: show a blank")
            if table["index"]:
                self.fail(page, f"table {number}", "shows a pandas index: hide it (book.tables)")

    def _check_reprs(self, driver: WebDriver, page: str) -> None:
        reprs = driver.execute_script(_REPRS_JS)
        if reprs:
            self.fail(page, "page text", f"shows {sorted(set(reprs))}: an output with no HTML or Markdown form")

    def _check_height(self, driver: WebDriver, page: str) -> None:
        height = page_height(driver)
        self.report.heights[page] = height
        if height > MAX_PAGE_HEIGHT_PX:
            self.fail(page, "page height", f"{height} px with collapsed sections closed (at most {MAX_PAGE_HEIGHT_PX})")

    def _check_math(self, driver: WebDriver, page: str) -> None:
        deadline = time.monotonic() + MATH_WAIT_S
        raw = int(driver.execute_script(_RAW_MATH_JS))
        if raw and not driver.execute_script("return !!(window.MathJax && window.MathJax.Hub);"):
            deadline = 0.0  # MathJax never loaded on this page: nothing will typeset them
        while raw and time.monotonic() < deadline:
            time.sleep(0.25)
            raw = int(driver.execute_script(_RAW_MATH_JS))
        if raw:
            self.fail(page, ".math", f"{raw} formula(s) still show TeX source: MathJax (mathjax/) did not typeset them")

    def _add_link(self, page: str, href: str, url: str, text: str) -> None:
        scheme = urlsplit(url).scheme.lower()
        if scheme == "file" or href.lower().startswith("file:"):
            self.fail(page, f"<a href={href!r}> ({text!r})", "file:// link will not work once published")
            return
        if scheme in NON_NAVIGATING_SCHEMES:
            return
        target = _local_path(url.split("#", 1)[0], self._base)
        if target is None:
            self.report.external_links += 1
            return
        self.report.internal_links += 1
        fragment = unquote(url.split("#", 1)[1]) if "#" in url else ""
        self._links.append(_Link(page, href, text, target, fragment))

    def _check_links(self) -> None:
        for link in self._links:
            element = f"<a href={link.href!r}> ({link.text!r})"
            ids = self._ids.get(link.target)  # None: a file not opened as a page (a download, a notebook source)
            if not (self.root / link.target).is_file():
                self.fail(link.page, element, f"{link.target} does not exist")
            elif ids is not None and link.fragment not in ("", "top") and link.fragment not in ids:
                self.fail(link.page, element, f"no element id={link.fragment!r} on {link.target}")

    def _check_images(self, driver: WebDriver, base: str, page: str) -> None:
        for img in driver.execute_async_script(_IMAGES_JS):
            element = f"<img #{img['index']} src={img['src']!r}>"
            if not img["complete"] or img["width"] <= 0:
                self.fail(page, element, "does not load in the browser (complete=false or naturalWidth=0)")
                continue
            target = _local_path(img["url"], base)
            if target is None or not target.startswith(FIGURE_DIR + "/"):
                continue
            self.report.figures.add(target)
            try:
                blank = is_blank_image(self.root / target)
            except UnidentifiedImageError:  # not a raster format Pillow reads (an SVG): judge what the browser drew
                elements = driver.find_elements(By.TAG_NAME, "img")
                blank = is_blank_image(elements[img["index"]].screenshot_as_png)
            if blank:
                self.fail(page, element, f"figure {target} is blank: every pixel is one colour")

    def _check_search(self, driver: WebDriver, base: str) -> None:
        page = f"search.html?q={self.query}"
        for needed in ("search.html", "searchindex.js"):
            if not (self.root / needed).is_file():  # the page would wait for its index for ever
                self.fail(page, needed, f"{needed} does not exist: the search cannot work")
                return
        driver.get(base + page)
        count_js = "return document.querySelectorAll('#search-results ul.search li').length"
        status_js = "const s = document.querySelector('#search-results p.search-summary'); return s?.textContent ?? ''"
        try:
            WebDriverWait(driver, 20, poll_frequency=0.1).until(
                lambda d: bool((d.execute_script(status_js) or "").strip())  # set once the search has finished
            )
        except TimeoutException:  # judged below by what the page shows
            pass
        self.report.search_results = int(driver.execute_script(count_js))
        if self.report.search_results == 0:
            status = (driver.execute_script(status_js) or "no search summary shown").strip()
            self.fail(page, "#search-results", f"no result for {self.query!r} ({status})")
            return
        results_js = """return Array.from(document.querySelectorAll('#search-results ul.search li a[href]'),
          a => ({href: a.getAttribute('href'), url: a.href, text: a.textContent.trim().slice(0, 60)}));"""
        for anchor in driver.execute_script(results_js):  # the results' links are checked like any other
            self._add_link(page, anchor["href"], anchor["url"], anchor["text"])


def check_site(
    root: Path,
    screenshots: Path | None = None,
    query: str = "speculative",
    chromium_path: Path = CHROMIUM,
    chromedriver_path: Path = CHROMEDRIVER,
    offline: bool = True,
    only: tuple[str, ...] = (),
) -> SiteReport:
    """Check the built book in ``root`` (``_build/html``), every page or ``only`` those named (paths relative to
    ``root``); see the module docstring for what is checked."""
    return SiteChecker(root, screenshots, query, chromium_path, chromedriver_path, offline, only).run()
