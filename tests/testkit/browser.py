"""Headless Chromium for the page tests (tests/browser/, bench/web_page.py): whether it starts,
and the rule that CI=true turns a missing browser into a failure instead of a skip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("AGENTCHAT_CHROMIUM", "/usr/bin/chromium"))


def browser_problem(chromium: Path = CHROMIUM) -> str | None:
    """Why the browser tests cannot run here, or None when Chromium starts."""
    if not (chromium.is_file() and os.access(chromium, os.X_OK)):
        return f"no browser at {chromium} (run `make browser`: Debian's chromium, needs root)"
    try:
        done = subprocess.run([str(chromium), "--headless", "--no-sandbox", "--version"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{chromium} does not start: {e}"
    if done.returncode != 0:
        return f"{chromium} --version failed: {done.stderr.strip()[-500:]}"
    return None


def require_browser(what: str) -> Path:
    """The browser, or a skip with the reason (a failure under CI=true)."""
    problem = browser_problem()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true needs the browser for {what}: {problem}")
        pytest.skip(problem)
    return CHROMIUM
