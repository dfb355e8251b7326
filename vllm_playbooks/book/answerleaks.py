"""The site check's answer-leak rule: a workshop exercise's expected answer must not be readable where a learner
looks before trying: on the first screen where a link of the exercise's page lands (a case page's also at its top),
or in a table shown (not collapsed) on that linked page."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from vllm_playbooks.book.workshop import EXERCISES, answer_forms, default_solution, mentions

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

#: Where the built book puts an exercise's page: ``book/executed/<notebook stem>.html``.
EXECUTED_PAGES = "book/executed"
#: The workshop's own page: it states every question, whose settings may coincide with an answer; not searched.
QUESTIONS_PAGE = "book/workshop.html"

# Runs in the page: the text of the first screen (text nodes of the main content that the viewport shows now;
# collapsed sections have no boxes), the text of each table the page shows, and the page's local links.
_SCREEN_JS = """
const main = document.querySelector("main") || document.body;
const height = window.innerHeight;
const screen = [];
const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
while (walker.nextNode()) {
  const node = walker.currentNode;
  if (!node.textContent.trim()) continue;
  const range = document.createRange();
  range.selectNodeContents(node);
  if (Array.from(range.getClientRects()).some(r => r.bottom > 0 && r.top < height && r.width > 0)) {
    screen.push(node.textContent);
  }
}
const tables = Array.from(main.querySelectorAll("table"))
  .filter(t => t.getClientRects().length > 0).map(t => t.innerText);
const article = document.querySelector("article") || main;  // the page's own text: no sidebar, no prev/next
const links = Array.from(article.querySelectorAll("a[href]"), a => a.href);
return {screen: screen.join(" "), tables: tables, links: links};
"""


@dataclass(frozen=True)
class Leak:
    """An exercise's answer (``forms``) readable at ``page`` (``where``: its first screen, or a table it shows)."""

    exercise: int
    page: str
    where: str
    forms: tuple[str, ...]


def exercise_forms(notebooks: Path) -> dict[str, tuple[int, set[str]]]:
    """Per exercise page (``book/executed/<stem>.html``): its number and the forms of its expected answer
    (``workshop.answer_forms`` of the notebook's default solution)."""
    out = {}
    for exercise in EXERCISES.values():
        page = f"{EXECUTED_PAGES}/{Path(exercise.notebook).stem}.html"
        out[page] = (exercise.number, answer_forms(default_solution(exercise, notebooks)))
    return out


def leaks_on(exercise: int, page: str, screen: str, tables: list[str], forms: set[str]) -> list[Leak]:
    """The places of one opened page that show ``forms``: its first screen, then each shown table by number."""
    found = []
    if hit := mentions(screen, forms):
        found.append(Leak(exercise, page, "first screen", tuple(hit)))
    for number, table in enumerate(tables, start=1):
        if hit := mentions(table, forms):
            found.append(Leak(exercise, page, f"table {number}", tuple(hit)))
    return found


def linked_pages(links: list[str], base: str, page: str) -> list[str]:
    """The book pages (``path`` or ``path#anchor``, site-relative) that ``links`` of ``page`` open, in order and
    once each; links within ``page`` itself, to the workshop's own page, to sources and off the site are left out."""
    out: list[str] = []
    for url in links:
        if not url.startswith(base):
            continue
        parts = urlsplit(url)
        path = unquote(parts.path).lstrip("/")
        target = path + (f"#{parts.fragment}" if parts.fragment else "")
        skipped = path in ("", page, QUESTIONS_PAGE) or path.startswith(("_sources/", "_static/"))
        if not skipped and target not in out:
            out.append(target)
    return out


def _open(driver: WebDriver, url: str) -> dict:
    driver.get(url)
    deadline = time.monotonic() + 30
    while driver.execute_script("return document.readyState") != "complete" and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the theme scrolls to the anchor once laid out
    return driver.execute_script(_SCREEN_JS)


def find_leaks(
    driver: WebDriver, base: str, pages: list[str], case_pages: set[str], exercises: Mapping[str, tuple[int, set[str]]]
) -> list[Leak]:
    """Open each exercise page of ``pages`` and every page its links land on (at their anchor; a case page of
    ``case_pages`` also at its top): the leaks of that exercise's answer (``exercises``: page → number and answer
    forms) on their first screens and in the tables they show."""
    found: list[Leak] = []
    for page, (number, forms) in exercises.items():
        if page not in pages or not forms:
            continue
        targets = linked_pages(_open(driver, base + page)["links"], base, page)
        tops = [t.split("#", 1)[0] for t in targets if "#" in t and t.split("#", 1)[0] in case_pages]
        for target in targets + [t for t in dict.fromkeys(tops) if t not in targets]:
            shown = _open(driver, base + target)
            found += leaks_on(number, target, shown["screen"], shown["tables"], forms)
    return found
