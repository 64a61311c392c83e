"""Debian's Chromium, headless, driven by Playwright: pages looked at as a person does, with every console error
kept. Playwright's own browser download is not used (`make setup-browser` installs Debian's package)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps calling Google's hosts, which this closed network refuses.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@dataclass
class Browser:
    page: object  # playwright.sync_api.Page
    console_errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def chromium(login: tuple[str, str] | None = None, width: int = 1400, height: int = 1000) -> Iterator[Browser]:
    """A fresh headless Chromium page (https errors ignored: the stack's own CA is not in Chromium's store)."""
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM), f"{CHROMIUM} missing: `make setup-browser` installs Debian's chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(
            ignore_https_errors=True, viewport={"width": width, "height": height},
            http_credentials={"username": login[0], "password": login[1]} if login else None)
        page = context.new_page()
        seen = Browser(page)
        page.on("console", lambda message: seen.console_errors.append(message.text)
                if message.type == "error" else None)
        page.on("pageerror", lambda error: seen.console_errors.append(str(error)))
        try:
            yield seen
        finally:
            browser.close()
