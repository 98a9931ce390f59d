"""The two Gradio apps (agent/gradio/blocks.py): `/chat` at the mount path with no page components
(its config still declares the welcome examples), the page's app under it, where a browser
opening the mount path is redirected, and the upload guard on both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from agentchat.agent.api.main import api_router
from agentchat.agent.main import MountPathClash, create_app
from agentchat.agent.settings import AgentSettings
from testkit.reliability import say
from testkit.stack import Stack


def test_chat_app_page_app_redirect_and_guard(stack: Stack) -> None:
    base = stack.agent.url + "/api/agent/gradio"
    for path, target in (("", "/api/agent/gradio/page/"), ("/", "/api/agent/gradio/page/"),
                         ("/?__theme=dark", "/api/agent/gradio/page/?__theme=dark")):
        r = httpx.get(base + path, follow_redirects=False, timeout=10)
        assert r.status_code == 307 and r.headers["location"] == target, (path, r.status_code)
    assert httpx.get(base + "/?view=api", follow_redirects=False, timeout=10).status_code == 200
    page = httpx.get(base + "/", follow_redirects=True, timeout=10)
    assert page.status_code == 200 and str(page.url).endswith("/api/agent/gradio/page/")

    chat = httpx.get(base + "/config", timeout=10).json()
    assert [d.get("api_name") for d in chat["dependencies"]] == ["chat"]
    assert not any(c.get("props", {}).get("elem_id") == "agentchat-input"
                   for c in chat["components"])  # none of the page's components
    examples = [e for c in chat["components"] for e in c.get("props", {}).get("examples") or []]
    assert {"text": "Что ты умеешь?"} in examples  # docs/protocol.md §1: the welcome chips
    page_config = httpx.get(base + "/page/config", timeout=10).json()
    assert any(c.get("props", {}).get("elem_id") == "agentchat-input"
               for c in page_config["components"])

    for upload in (base + "/gradio_api/upload", base + "/page/gradio_api/upload"):
        r = httpx.post(upload, files={"files": ("a.txt", b"x")}, timeout=10)
        assert r.status_code == 401, (upload, r.status_code)  # a user token is required
        ok = httpx.post(upload, files={"files": ("a.txt", b"x")}, timeout=10,
                        headers={"Authorization": f"Bearer {stack.token('alice')}"})
        assert ok.status_code == 200, (upload, ok.text)


def test_the_page_is_off_outside_dev_unless_turned_on(stack: Stack, tmp_path: Path) -> None:
    """Issue 31: the Svelte panel is the product UI; the built-in page is mounted in production
    only when AGENTCHAT_AGENT_PAGE_ENABLED turns it on. Off, its paths are unknown ones and
    the mount path no longer sends a browser there; `/chat` works as before."""
    for mode, enabled, on in (("dev", None, True), ("production", None, False),
                              ("production", True, True), ("dev", False, False)):
        settings = AgentSettings(data_dir=tmp_path, mode=mode,  # type: ignore[call-arg]
                                 page_enabled=enabled)
        assert settings.page_on is on, (mode, enabled)
    agent = stack.start_agent(AGENTCHAT_AGENT_PAGE_ENABLED="false")
    try:
        base = agent.url + "/api/agent/gradio"
        for path in ("/page/", "/page/config", "/page/gradio_api/queue/join"):
            r = httpx.get(base + path, timeout=10, follow_redirects=False)
            assert r.status_code in (404, 405), (path, r.status_code)
        assert httpx.get(base + "/", timeout=10, follow_redirects=False).status_code != 307
        out = say(agent, stack.token("alice"), "привет")
        assert out.kind == "final", out.types()
    finally:
        agent.stop()


def test_an_idle_gradio_queue_polls_at_our_pace_not_every_millisecond(tmp_path: Path) -> None:
    """Gradio's queue looks for new jobs every 1 ms while idle (~9 % of a core for the two
    mounted Blocks of an idle replica); mounted by us it polls at `gradio_queue_poll_s`. The
    attributes are Gradio's own: this fails if an upgrade renames them."""
    import gradio as gr
    from fastapi import FastAPI

    from agentchat.agent.gradio.mount import _mount_one

    with gr.Blocks() as blocks:
        gr.Markdown("x")
    settings = AgentSettings(data_dir=tmp_path, mode="dev",  # type: ignore[call-arg]
                             tuning={"gradio_queue_poll_s": 0.02})
    _mount_one(FastAPI(), blocks, "/g", settings)
    assert blocks._queue.sleep_when_free == 0.02
    assert blocks._queue.progress_update_sleep_when_free == 0.1


def test_gradio_is_matched_first_and_may_not_hide_a_rest_route(tmp_path: Path) -> None:
    """Gradio's mounts come before the REST routes (a submit's several requests skip them);
    a mount path with REST routes under it is refused instead of hiding them."""
    app = create_app(AgentSettings(data_dir=tmp_path, mode="dev"))  # type: ignore[call-arg]

    def paths(route: Any) -> list[str]:  # an included router stands for its own routes
        inner = getattr(route, "original_router", None)
        return [p for r in inner.routes for p in paths(r)] if inner else [route.path]

    order = [p for r in app.router.routes for p in paths(r)]
    queue = "/api/agent/gradio/gradio_api/"
    # The page's app, /chat's queue routes (chat_queue.py), then /chat's app.
    assert [p for p in order if p.startswith("/api/agent/gradio")] == [
        "/api/agent/gradio/page", queue + "queue/join", queue + "queue/data", queue + "cancel",
        "/api/agent/gradio"]
    top = [getattr(r, "original_router", None) or r.path for r in app.router.routes]
    assert top.index("/api/agent/gradio") < top.index(api_router)  # the REST routes after
    for clash in ("/api/agent", "/api/assistant/", "/"):
        with pytest.raises(MountPathClash, match="would hide the REST"):
            create_app(AgentSettings(data_dir=tmp_path, mode="dev",  # type: ignore[call-arg]
                                     tuning={"mount_path": clash}))
