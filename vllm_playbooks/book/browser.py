"""The browser the site check (``book.sitecheck``) reads the book in: the built folder served over local HTTP,
headless Chromium driven by Selenium through the system chromedriver, and what it measures of a page as drawn (its
rendered height, a full-page screenshot, whether an image is a single colour)."""

from __future__ import annotations

import base64
import http.server
import io
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: Flags that work for headless Debian Chromium run as root in a container, with a fresh profile added per run.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,900",
    "--hide-scrollbars",
)
#: Makes every host name except the local server's unresolvable: the check never depends on the network.
OFFLINE_FLAG = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
#: A screenshot's height is capped here (px).
MAX_SCREENSHOT_HEIGHT = 16000


class SiteCheckError(RuntimeError):
    """The check could not run at all (no Chromium, no chromedriver, no built book)."""


def is_blank_image(data: bytes | Path) -> bool:
    """True when every pixel has the same colour (or every pixel is fully transparent).

    Raises ``PIL.UnidentifiedImageError`` for a format Pillow cannot read (an SVG, for one).
    """
    with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as img:
        rgba = img.convert("RGBA")
    if rgba.getchannel("A").getbbox() is None:  # no pixel with any opacity
        return True
    return rgba.getcolors(maxcolors=1) is not None  # None as soon as there are two colours


def _quiet_handler(directory: Path) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            """Say nothing per request."""

    return Handler


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on a free local port for the duration; yields the base URL (ending in ``/``)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _quiet_handler(root))
    thread = threading.Thread(target=server.serve_forever, name="site-check-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def chromium(
    chromium_path: Path = CHROMIUM, chromedriver_path: Path = CHROMEDRIVER, offline: bool = True
) -> Iterator[WebDriver]:
    """A headless Chromium driven by Selenium through the system chromedriver, with a fresh profile; nothing is
    downloaded (``SE_OFFLINE=true``, explicit driver and browser paths)."""
    for path in (chromium_path, chromedriver_path):
        if not path.exists():
            raise SiteCheckError(f"{path} not found: run .ci/site-check-setup.sh (apt-get chromium chromium-driver)")
    os.environ.setdefault("SE_OFFLINE", "true")
    profile = tempfile.mkdtemp(prefix="site-check-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium_path)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", *((OFFLINE_FLAG,) if offline else ())):
        options.add_argument(flag)
    driver = None
    try:
        driver = webdriver.Chrome(service=Service(executable_path=str(chromedriver_path)), options=options)
        driver.set_page_load_timeout(60)
        driver.set_script_timeout(120)
        yield driver
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_ready(driver: WebDriver, timeout: float = 30) -> None:
    """Wait up to ``timeout`` seconds for the current page's ``document.readyState`` to be ``complete``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if driver.execute_script("return document.readyState") == "complete":
            return
        time.sleep(0.05)


#: Runs in the page before a screenshot: undo the scrolling of the image check, in the window and in every element
#: (scrolling an image into view can scroll an inner container sideways, and the shot would start mid-page).
UNSCROLL_JS = """
window.scrollTo(0, 0);
for (const el of document.querySelectorAll("*")) { if (el.scrollLeft || el.scrollTop) el.scrollTo(0, 0); }
"""


def save_screenshot(driver: WebDriver, target: Path) -> bytes:
    """A full-page PNG of the current page (height capped at MAX_SCREENSHOT_HEIGHT), written to ``target``."""
    driver.execute_script(UNSCROLL_JS)
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    clip = {
        "x": 0,
        "y": 0,
        "width": max(1, int(size["width"])),
        "scale": 1,
        "height": max(1, min(int(size["height"]), MAX_SCREENSHOT_HEIGHT)),
    }
    params = {"format": "png", "captureBeyondViewport": True, "clip": clip}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", params)
    data = base64.b64decode(shot["data"])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return data


def page_height(driver: WebDriver) -> int:
    """The current page's rendered height in px, scrolled back to its top first."""
    driver.execute_script(UNSCROLL_JS)
    return int(driver.execute_script("return document.documentElement.scrollHeight"))
