"""The built-in page at /api/agent/gradio in headless Chromium (tests/js/page.test.mjs).

Debian's /usr/bin/chromium drives the page through playwright-core; `make test` installs it with
tools/ensure_browser.py where it can (root and apt). Without a browser this test skips and says
why, except under CI=true, where a missing browser is a failure. Screenshots of every step are
kept in the test's tmp dir (printed at the end).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.browser import require_browser
from testkit.stack import CLIENT_SECRET, Stack
from testkit.support import ROOT

JS = ROOT / "tests" / "js"


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Checked before the stack starts, so a machine without a browser skips at once."""
    return require_browser("the built-in page test")


def test_builtin_page(chromium: Path, stack: Stack, tmp_path: Path) -> None:
    if not (JS / "node_modules" / "playwright-core").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS,
                       check=True)
    node = shutil.which("node")
    assert node, "Node 20 is required for the built-in page test"
    shots = tmp_path / "screenshots"
    env = {**stack.node_env(), "CHROMIUM": str(chromium), "PAGE_SHOTS": str(shots),
           "SANDBOX_CLIENT_SECRET": CLIENT_SECRET}
    # --test-force-exit: a stuck browser must not hang the suite past node's own timeouts.
    out = subprocess.run([node, "--test", "--test-force-exit", "--test-reporter=spec",
                          "page.test.mjs"], cwd=JS, env=env, capture_output=True, text=True,
                         timeout=600)
    print(out.stdout[-20000:])
    print(out.stderr[-5000:])
    print(f"screenshots: {shots}")
    assert out.returncode == 0, "the built-in page test failed (output above)"
    assert len(list(shots.glob("*.png"))) >= 8, "a screenshot of every step"
