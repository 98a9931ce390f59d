"""The built-in page at /api/agent/gradio in headless Chromium (tests/js/page.test.mjs).

Debian's /usr/bin/chromium drives the page through playwright-core; `make test` installs it with
tools/ensure_browser.py where it can (root and apt). Without a browser this test skips and says
why, except under CI=true, where a missing browser is a failure. Screenshots of every step are
kept in the test's tmp dir (printed at the end).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.stack import Stack
from testkit.support import ROOT

JS = ROOT / "tests" / "js"
CHROMIUM = Path(os.environ.get("AGENTCHAT_CHROMIUM", "/usr/bin/chromium"))


def _browser_problem() -> str | None:
    """Why the page test cannot run here, or None when Chromium starts."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"no browser at {CHROMIUM} (run `make browser`: Debian's chromium, needs root)"
    try:
        done = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--version"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{CHROMIUM} does not start: {e}"
    if done.returncode != 0:
        return f"{CHROMIUM} --version failed: {done.stderr.strip()[-500:]}"
    return None


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Checked before the stack starts, so a machine without a browser skips at once."""
    problem = _browser_problem()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true needs the browser for the built-in page test: {problem}")
        pytest.skip(problem)
    return CHROMIUM


def test_builtin_page(chromium: Path, stack: Stack, tmp_path: Path) -> None:
    if not (JS / "node_modules" / "playwright-core").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS,
                       check=True)
    node = shutil.which("node")
    assert node, "Node 20 is required for the built-in page test"
    shots = tmp_path / "screenshots"
    env = {**stack.node_env(), "CHROMIUM": str(chromium), "PAGE_SHOTS": str(shots)}
    # --test-force-exit: a stuck browser must not hang the suite past node's own timeouts.
    out = subprocess.run([node, "--test", "--test-force-exit", "--test-reporter=spec",
                          "page.test.mjs"], cwd=JS, env=env, capture_output=True, text=True,
                         timeout=600)
    print(out.stdout[-20000:])
    print(out.stderr[-5000:])
    print(f"screenshots: {shots}")
    assert out.returncode == 0, "the built-in page test failed (output above)"
    assert len(list(shots.glob("*.png"))) >= 7, "a screenshot of every step"
