"""The panel (web/, issue 19) in headless Chromium against the real stack: the page the agent
serves at /api/agent/ui/ through every row of docs/ux.md's UX tests table (panel.test.mjs), issue
36's daily use (daily.test.mjs), and the library imported by a minimal host app that drives one
turn (host.test.mjs, host/), issue 35's branches (branches.test.mjs), and hostile Markdown
(markdown.test.mjs).

One stack for the module: agent A (offline planner paced at 30 tokens/s, so streams can be
watched, stopped and cut), agent B (its model the OpenAI-compatible stub, which a test makes
refuse and then answer) and agent C, A with a 5 s `/chat` heartbeat for the daily-use tests (a
silent cut is noticed after two missed beats: 10 s rather than A's 30 of real time; the page
reads the interval from the agent's config.json). The page test stops agent A at its end, so
it runs last.

Debian's /usr/bin/chromium through playwright-core (tests/js/node_modules, `make js`); without a
browser the tests skip and say why, except under CI=true, where that is a failure. The page
must be built (`make web`; `make test` does it). Screenshots of every state go to the test's
tmp dir (printed with -s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.browser import require_browser
from testkit.stack import Stack, stack_on_own_database
from testkit.support import ROOT, Service, free_port, start_openai_stub

HERE = Path(__file__).resolve().parent
WEB = ROOT / "web"
JS = ROOT / "tests" / "js"


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Checked before the stack starts, so a machine without a browser skips at once."""
    path = require_browser("the panel's browser tests")
    assert (WEB / "build" / "index.html").is_file(), "the page is not built: run `make web`"
    assert (JS / "node_modules" / "playwright-core").exists(), "run `make js`"
    assert (JS / "node_modules" / "axe-core").exists(), "run `make js` (axe-core is new)"
    return path


@pytest.fixture(scope="module")
def stub() -> Iterator[Service]:
    svc = start_openai_stub()
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def panel_stack(chromium: Path, tmp_path_factory: pytest.TempPathFactory, pg_server: str,
                migrated_template: str, stub: Service) -> Iterator[Stack]:
    with stack_on_own_database(pg_server, migrated_template, tmp_path_factory.mktemp("panel"),
                               AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.03",
                               AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS="none") as s:
        s.start_agents({"AGENTCHAT_AGENT_LLM": "openai:stub",
                        "AGENTCHAT_AGENT_LLM_BASE_URL": stub.url + "/v1",
                        "AGENTCHAT_AGENT_LLM_API_KEY": "unused",
                        "AGENTCHAT_AGENT_LLM_TIMEOUT_S": "5"},
                       {"AGENTCHAT_AGENT_TUNING__STREAM_HEARTBEAT_S": "5"})
        yield s


def _node(stack: Stack, script: str, shots: Path, timeout: float, **extra: str) -> None:
    node = shutil.which("node")
    assert node, "Node 20 is required for the browser tests"
    assert stack.agent.proc is not None
    env = {**stack.node_env(), "CHROMIUM": str(require_browser("the browser tests")),
           "PAGE_SHOTS": str(shots), "LLM_AGENT_URL": stack.agents[1].url,
           "AGENT_PID": str(stack.agent.proc.pid), **extra}
    # --test-force-exit: a stuck browser must not hang the suite past node's own timeouts.
    out = subprocess.run([node, "--test", "--test-force-exit", "--test-reporter=spec", script],
                         cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)
    print(out.stdout[-30000:])
    print(out.stderr[-5000:])
    print(f"screenshots: {shots}")
    if out.returncode != 0:
        for svc in stack.agents:
            print(f"--- agent log ---\n{svc.log_tail(4000)}")
    assert out.returncode == 0, f"{script} failed (output above)"


def test_the_library_in_a_host_app(panel_stack: Stack, tmp_path: Path) -> None:
    """tests/browser/host/: built with Vite against web/dist, served with the agent's paths
    behind it; it imports the package and drives one turn."""
    assert (WEB / "dist" / "index.js").is_file(), "the library is not packaged: run `make web`"
    # A copy whose node_modules is web's: one svelte for the host and the package.
    src = tmp_path / "host"
    shutil.copytree(HERE / "host", src)
    (src / "node_modules").symlink_to(WEB / "node_modules", target_is_directory=True)
    out = tmp_path / "host-build"
    vite = WEB / "node_modules" / ".bin" / "vite"
    done = subprocess.run([str(vite), "build", "--outDir", str(out), "--logLevel", "warn"],
                          cwd=src, env={**os.environ, "WEB_DIR": str(WEB)},
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _node(panel_stack, "host.test.mjs", tmp_path / "screenshots", 180, HOST_BUILD=str(out),
          HOST_PORT=str(free_port()))


@pytest.mark.timeout(600)
def test_daily_use(panel_stack: Stack, tmp_path: Path) -> None:
    """Issue 36 (daily.test.mjs): Markdown, history titles, endless lists, rename, uploads, a
    silent cut noticed by the heartbeat (agent C's), Stop on a rejoined run, the card's words.
    Before the 002 rows, whose last test stops agent A."""
    shots = tmp_path / "screenshots"
    _node(panel_stack, "daily.test.mjs", shots, 540, AGENT_URL=panel_stack.agents[2].url)
    assert len(list(shots.glob("d*.png"))) >= 9, "a screenshot of every new state"


def test_branches(panel_stack: Stack, tmp_path: Path) -> None:
    """Issue 35 (branches.test.mjs): edit, the version picker by keyboard, regenerate; axe
    clean. Before the 002 rows, whose last test stops agent A."""
    shots = tmp_path / "screenshots"
    _node(panel_stack, "branches.test.mjs", shots, 240)
    assert len(list(shots.glob("b*.png"))) >= 3, "a screenshot of every new state"


def test_hostile_markdown(panel_stack: Stack, tmp_path: Path) -> None:
    """markdown.test.mjs: 2,000 `>`, 4,000 list markers, 400 list levels and emphasis 3,000 deep
    render clamped, each within 100 ms in the page (the 400 levels and the emphasis: 250 ms),
    and the conversation around them still renders. Before the 002 rows, whose last test stops
    agent A."""
    shots = tmp_path / "screenshots"
    _node(panel_stack, "markdown.test.mjs", shots, 180)
    assert len(list(shots.glob("m*.png"))) >= 1, "a screenshot of the conversation"


@pytest.mark.timeout(600)
def test_every_ux_row_of_002(panel_stack: Stack, stub: Service, tmp_path: Path) -> None:
    shots = tmp_path / "screenshots"
    _node(panel_stack, "panel.test.mjs", shots, 420, STUB_URL=stub.url)
    assert len(list(shots.glob("*.png"))) >= 17, "a screenshot of every state"
