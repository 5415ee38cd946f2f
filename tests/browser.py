"""Headless Chromium for the report and Prefect UI tests: Debian's chromium (`make browser` installs it with apt),
driven by Playwright, never a browser Playwright downloads. Missing Chromium skips those tests with the reason,
except under CI (CI=true), where it fails them: CI must run them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("KERNELFLOW_CHROMIUM", "/usr/bin/chromium")
# A closed network: no background connections (they would be refused, many at a time), no QUIC, no sync/updates.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    if Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    why = f"no Chromium at {CHROMIUM}: `apt-get install -y chromium` as root (`make test` does it where apt works)"
    if os.environ.get("CI"):
        pytest.fail(why + "; CI must run the browser tests")
    pytest.skip(why)


@dataclass
class Watched:
    """What a page did: console errors, uncaught exceptions, the URLs it requested."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@contextmanager
def browser(profile: Path) -> Iterator:
    """A headless Chromium context with a fresh profile directory."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(str(profile), executable_path=executable, headless=True,
                                                        args=FLAGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


def watch(page) -> Watched:
    seen = Watched()
    page.on("console", lambda m: seen.errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.errors.append(f"page error: {e}"))
    page.on("request", lambda r: seen.requests.append(r.url))
    return seen
