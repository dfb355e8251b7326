"""``vllm-playbooks site-check``: open the built book in headless Chromium and check its pages."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.book.browser import CHROMEDRIVER, CHROMIUM, SiteCheckError
from vllm_playbooks.book.sitecheck import MAX_PAGE_HEIGHT_PX, check_site


@dataclass(frozen=True)
class Args:
    """The built book, the screenshot folder, the search query, the browser and driver, the network switch, and the
    pages to check (all when empty)."""

    html: Path
    screenshots: Path | None = None
    query: str = "speculative"
    chromium: Path = CHROMIUM
    chromedriver: Path = CHROMEDRIVER
    allow_network: bool = False
    pages: tuple[str, ...] = ()

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The built book, the screenshot folder, the search query, the browser and driver."""
        parser.add_argument("html", type=Path, help="the built book, e.g. _build/html")
        parser.add_argument("--screenshots", type=Path, default=None, help="folder for the PNG screenshots")
        parser.add_argument("--query", default="speculative", help="what to search for (default: speculative)")
        parser.add_argument("--chromium", type=Path, default=CHROMIUM, help=f"browser binary (default {CHROMIUM})")
        parser.add_argument("--chromedriver", type=Path, default=CHROMEDRIVER, help=f"driver (default {CHROMEDRIVER})")
        parser.add_argument("--allow-network", action="store_true", help="let the browser resolve other hosts")
        parser.add_argument(
            "--page",
            action="append",
            default=[],
            help="check only this page (repeatable), as listed under the build, e.g. book/executed/pp-27462.html",
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(
            html=namespace.html,
            screenshots=namespace.screenshots,
            query=str(namespace.query),
            chromium=namespace.chromium,
            chromedriver=namespace.chromedriver,
            allow_network=bool(namespace.allow_network),
            pages=tuple(namespace.page),
        )


def run(args: Args) -> int:
    """Check the built book; exit 1 when a page fails, 2 when the check could not run."""
    started = time.monotonic()
    try:
        report = check_site(
            args.html,
            args.screenshots,
            args.query,
            args.chromium,
            args.chromedriver,
            not args.allow_network,
            args.pages,
        )
    except SiteCheckError as exc:
        print(f"error: site-check: {exc}", file=sys.stderr)
        return 2
    for failure in report.failures:
        print(f"site-check FAIL {failure}", file=sys.stderr)
    if report.screenshots:
        print(f"site-check: {len(report.screenshots)} screenshots in {args.screenshots}")
    for page, height in sorted(report.heights.items()):
        print(f"site-check: {page} is {height} px high (at most {MAX_PAGE_HEIGHT_PX})")
    print(
        f"site-check: {report.external_links} external links not followed, {report.search_results} search results "
        f"for {args.query!r}, {time.monotonic() - started:.1f} s"
    )
    print(report.summary())
    return 0 if report.ok else 1
