"""`/api/agent/ui/*` (agent/api/routes/ui.py) over HTTP against real agent processes: the page,
its CSP and caching, config.json and the dev token route in dev and in production, and the
switch that keeps the page off in production unless enabled.

The page here is a small stand-in build (an index.html with one inline script, a hashed asset),
so these tests check the route whatever state web/ is in; tests/browser/ runs the real build.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.stack import CLIENT_SECRET, Stack
from testkit.support import Service, free_port

INLINE = "window.__boot = 1;"
INDEX = (f'<!doctype html><html><head><script>{INLINE}</script>'
         '<script type="module" crossorigin src="./assets/index-abc123.js"></script>'
         '<link rel="stylesheet" href="./assets/index-abc123.css"></head>'
         '<body><div id="app"></div></body></html>')


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("web-build")
    (root / "assets").mkdir()
    (root / "index.html").write_text(INDEX)
    (root / "assets" / "index-abc123.js").write_text("console.log('panel');\n")
    (root / "assets" / "index-abc123.css").write_text("body{margin:0}\n")
    (root / "favicon.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (root.parent / "secret.txt").write_text("outside the build")
    return root


@pytest.fixture(scope="module")
def dev(stack: Stack, build: Path) -> Service:
    """A dev agent serving the stand-in build (the page is on in dev by default)."""
    return stack.start_agent(AGENTCHAT_AGENT_TUNING__UI_DIR=str(build))


def _production(stack: Stack, build: Path, name: str, **env: str) -> Service:
    assert stack.sandbox and stack.policy
    port = free_port()
    full = {**stack.base_env(), "AGENTCHAT_AGENT_SSTOOLS_URL": stack.sandbox.url,
            "AGENTCHAT_AGENT_SERVICE_TOKEN_URL": stack.sandbox.url + "/api/auth/service-token",
            "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": CLIENT_SECRET,
            "AGENTCHAT_AGENT_POLICY_URL": stack.policy.url,
            "AGENTCHAT_USER_JWKS_PATH": str(stack.settings().user_jwks),
            "AGENTCHAT_MODE": "production", "AGENTCHAT_AGENT_TUNING__UI_DIR": str(build), **env}
    return Service(["serve", "--port", str(port)], env=full, port=port,
                   log=stack.data_dir / f"agent-{name}.log").start(timeout=90)


@pytest.fixture(scope="module")
def prod_off(stack: Stack, build: Path) -> Iterator[Service]:
    svc = _production(stack, build, "prod-off")
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def prod_on(stack: Stack, build: Path) -> Iterator[Service]:
    svc = _production(stack, build, "prod-on", AGENTCHAT_AGENT_UI_ENABLED="true")
    yield svc
    svc.stop()


def _get(svc: Service, path: str, **kw: object) -> httpx.Response:
    return httpx.get(svc.url + path, timeout=10, **kw)  # type: ignore[arg-type]


def test_the_page_is_served_with_its_csp_and_never_cached(dev: Service) -> None:
    page = _get(dev, "/api/agent/ui/")
    assert page.status_code == 200 and page.text == INDEX
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    csp = dict(d.strip().split(" ", 1) for d in page.headers["content-security-policy"].split(";"))
    digest = base64.b64encode(hashlib.sha256(INLINE.encode()).digest()).decode()
    # Same-origin scripts, and the one inline script by its hash: never 'unsafe-inline'.
    assert csp["script-src"] == f"'self' 'sha256-{digest}'"
    assert csp["connect-src"] == "'self'" and csp["default-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'" and csp["object-src"] == "'none'"
    assert "unsafe" not in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    # Without the slash the relative asset URLs would resolve one level up.
    bare = _get(dev, "/api/agent/ui")
    assert bare.status_code == 308 and bare.headers["location"] == "ui/"


def test_assets_are_immutable_and_nothing_outside_the_build_is_served(dev: Service) -> None:
    js = _get(dev, "/api/agent/ui/assets/index-abc123.js")
    assert js.status_code == 200 and "panel" in js.text
    assert js.headers["content-type"].startswith("text/javascript")
    assert js.headers["cache-control"] == "public, max-age=31536000, immutable"
    css = _get(dev, "/api/agent/ui/assets/index-abc123.css")
    assert css.headers["content-type"].startswith("text/css")
    icon = _get(dev, "/api/agent/ui/favicon.svg")
    assert icon.status_code == 200 and icon.headers["cache-control"] == "no-cache"
    for path in ("/api/agent/ui/assets/missing.js", "/api/agent/ui/../secret.txt",
                 "/api/agent/ui/%2e%2e/secret.txt", "/api/agent/ui/assets/%2e%2e/../secret.txt",
                 "/api/agent/ui/.hidden"):
        resp = _get(dev, path)
        assert resp.status_code == 404, path
        assert "outside the build" not in resp.text


def test_config_in_dev_lists_the_demo_users(dev: Service) -> None:
    resp = _get(dev, "/api/agent/ui/config.json")
    assert resp.status_code == 200 and resp.headers["cache-control"] == "no-store"
    config = resp.json()
    assert config["api_base"] == "/api/agent"
    assert config["gradio_path"] == "/api/agent/gradio"
    assert config["assistant_base"] == "/api/assistant"
    assert config["dev"] is True
    assert [u["id"] for u in config["demo_users"]] == ["alice", "bob", "carol", "dave"]
    assert all(u["label"].startswith(u["id"]) for u in config["demo_users"])


def test_dev_token_mints_a_token_the_agent_accepts(dev: Service) -> None:
    resp = httpx.post(dev.url + "/api/agent/ui/dev/token", json={"user": "bob"}, timeout=10)
    assert resp.status_code == 200 and resp.headers["cache-control"] == "no-store"
    token = resp.json()["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == "bob" and "editor@ss-dev" in claims["roles"]
    listed = _get(dev, "/api/assistant/conversations",
                  headers={"Authorization": f"Bearer {token}"})
    assert listed.status_code == 200, listed.text


@pytest.mark.parametrize("body", [{"user": "mallory"}, {"user": ""}, {"user": "a" * 500},
                                  {}, {"user": "alice", "roles": ["admin"]}, {"user": 1}])
def test_dev_token_refuses_what_is_not_a_demo_user(dev: Service, body: dict[str, object]) -> None:
    resp = httpx.post(dev.url + "/api/agent/ui/dev/token", json=body, timeout=10)
    assert resp.status_code == 422, resp.text
    err = resp.json()
    assert err["code"] == "INVALID_REQUEST" and err["detail"].startswith("body")
    assert "token" not in err
    if body.get("user") == "mallory":
        assert "alice, bob, carol" in err["detail"]


def test_a_missing_build_says_how_to_build_it(dev: Service, build: Path) -> None:
    index = build / "index.html"
    index.rename(build / "index.moved")
    try:
        resp = _get(dev, "/api/agent/ui/")
        assert resp.status_code == 503
        assert resp.json()["code"] == "INTERNAL" and "make web" in resp.json()["detail"]
    finally:
        (build / "index.moved").rename(index)
    assert _get(dev, "/api/agent/ui/").status_code == 200


def test_production_serves_no_page_unless_enabled(prod_off: Service) -> None:
    unknown = _get(prod_off, "/api/agent/no-such-route")
    for path in ("/api/agent/ui/", "/api/agent/ui", "/api/agent/ui/config.json",
                 "/api/agent/ui/assets/index-abc123.js"):
        resp = _get(prod_off, path)
        assert resp.status_code == 404, path
        assert resp.json() == unknown.json()  # nothing says a page exists here
    mint = httpx.post(prod_off.url + "/api/agent/ui/dev/token", json={"user": "alice"},
                      timeout=10)
    assert mint.status_code == 404 and "token" not in mint.json()


def test_production_enabled_serves_the_page_without_dev_routes(prod_on: Service) -> None:
    page = _get(prod_on, "/api/agent/ui/")
    assert page.status_code == 200 and "content-security-policy" in page.headers
    config = _get(prod_on, "/api/agent/ui/config.json").json()
    assert config == {"api_base": "/api/agent", "gradio_path": "/api/agent/gradio",
                      "assistant_base": "/api/assistant", "dev": False, "demo_users": [],
                      "max_files": 5, "max_file_bytes": 1 << 20,
                      "max_files_total_bytes": 5 << 20, "heartbeat_s": 15.0}
    for body in ({"user": "alice"}, {"user": "mallory"}):
        mint = httpx.post(prod_on.url + "/api/agent/ui/dev/token", json=body, timeout=10)
        # 404 before the body is even looked at: outside dev the route does not exist.
        assert mint.status_code == 404, (body, mint.text)
