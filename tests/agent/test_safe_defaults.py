"""Safe defaults and limits, from outside: the mode when nothing is set, the test model refused
outside dev, the public JWKS route, `llm-status` behind a token with one probe per interval,
the request-body limit, per-user `/chat` limits, and the operator's key pre-publication floor.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from gradio_client import Client

from agentchat.keys import PUBLIC_JWK_MEMBERS
from agentchat.operator.spec import PRE_PUBLICATION_FLOOR_S, InvalidSpec, parse_spec
from testkit.chart import HelmError, lint, matrix, render
from testkit.kube_emulator import KubeEmulator
from testkit.raw_chat import RawChat
from testkit.stack import CLIENT_SECRET, Stack
from testkit.support import AGENTCHAT, ROOT, Service, free_port

# --- settings with nothing set ---------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any AGENTCHAT_ variable (so no mode), plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCHAT_")}
    return {**env, **extra}


def run_cli(*args: str, env: dict[str, str],
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTCHAT, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=ROOT)


def test_unset_mode_is_production(tmp_path: Path) -> None:
    code = ("from agentchat.agent.settings import AgentSettings;"
            "from agentchat.operator.settings import OperatorSettings;"
            "a = AgentSettings(); print(a.mode, a.is_dev, OperatorSettings().mode)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False,
                         env=clean_env(AGENTCHAT_DATA_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["production", "False", "production"]
    bad = subprocess.run([sys.executable, "-c", "from agentchat.settings import SharedSettings;"
                          "SharedSettings()"], capture_output=True, text=True, timeout=60,
                         check=False, env=clean_env(AGENTCHAT_MODE="staging"))
    assert bad.returncode != 0 and "mode" in bad.stderr


@pytest.mark.parametrize(("env", "reason"), [
    ({"AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": "dev-client-secret"},
     "placeholder service client secret is refused outside dev"),
    # The benchmarks' baselines: no audit trail, no run event log.
    ({"AGENTCHAT_AGENT_AUDIT": "false"}, "AGENTCHAT_AGENT_AUDIT=false: for benchmarks and "
     "tests only, refused outside dev mode (AGENTCHAT_MODE=dev)"),
    ({"AGENTCHAT_AGENT_TUNING__RUN_EVENTS": "0"},
     "AGENTCHAT_AGENT_TUNING__RUN_EVENTS=false: for benchmarks"),
])
def test_agent_without_a_mode_refuses_dev_only_settings(tmp_path: Path, env: dict[str, str],
                                                        reason: str) -> None:
    out = run_cli("serve", env=clean_env(AGENTCHAT_DATA_DIR=str(tmp_path), **env))
    assert out.returncode == 2, (out.stdout, out.stderr[-2000:])
    assert "refusing to start" in out.stderr and reason in out.stderr
    assert "Traceback" not in out.stderr


def test_the_sidecar_without_a_mode_refuses_to_keep_no_decision_log(tmp_path: Path) -> None:
    out = run_cli("policy", "serve", "--port", str(free_port()),
                  env=clean_env(AGENTCHAT_DATA_DIR=str(tmp_path),
                                AGENTCHAT_POLICY_DECISION_LOG_STDOUT="false"))
    assert out.returncode == 2, (out.stdout, out.stderr[-2000:])
    assert ("refusing to start: Value error, AGENTCHAT_POLICY_DECISION_LOG_STDOUT=false without "
            "AGENTCHAT_POLICY_DECISION_LOG_PATH: for benchmarks and tests only") in out.stderr
    assert "Traceback" not in out.stderr


def test_in_dev_the_benchmark_switches_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from the environment as the entry points read it; with a decision log file the
    sidecar's stdout may be off anywhere."""
    from agentchat.agent.settings import AgentSettings
    from agentchat.policy.settings import PolicySettings

    for name in ("AGENTCHAT_AGENT_AUDIT", "AGENTCHAT_AGENT_TUNING__RUN_EVENTS",
                 "AGENTCHAT_POLICY_DECISION_LOG_STDOUT"):
        monkeypatch.setenv(name, "false")
    monkeypatch.setenv("AGENTCHAT_MODE", "dev")
    agent = AgentSettings()
    assert (agent.audit, agent.tuning.run_events) == (False, False)
    assert PolicySettings().policy_decision_log_stdout is False
    monkeypatch.setenv("AGENTCHAT_MODE", "production")
    monkeypatch.setenv("AGENTCHAT_POLICY_DECISION_LOG_PATH", "/var/log/decisions.jsonl")
    assert PolicySettings().policy_decision_log_stdout is False


def test_the_benchmark_probes_refuse_to_run_outside_dev(tmp_path: Path) -> None:
    """bench/memprobe on a process's PYTHONPATH with an AGENTCHAT_BENCH_* probe and no dev
    mode (a benchmark's environment copied into a deployment): the process stops before the
    agent starts, naming the variable; with AGENTCHAT_MODE=dev it runs."""
    gc_file = tmp_path / "gc.json"
    env = clean_env(PYTHONPATH=str(ROOT / "bench" / "memprobe"),
                    AGENTCHAT_BENCH_GCSTATS_FILE=str(gc_file), AGENTCHAT_DATA_DIR=str(tmp_path))
    out = run_cli("serve", env=env)
    assert out.returncode == 2, (out.stdout, out.stderr[-2000:])
    assert ("refusing to start: AGENTCHAT_BENCH_GCSTATS_FILE: for benchmarks only, refused "
            "outside dev mode (AGENTCHAT_MODE=dev)") in out.stderr
    assert "Traceback" not in out.stderr and not gc_file.exists()
    dev = subprocess.run([sys.executable, "-c", "print('probed')"], capture_output=True,
                         text=True, timeout=60, check=False, env={**env, "AGENTCHAT_MODE": "dev"})
    assert (dev.returncode, dev.stdout.strip()) == (0, "probed"), dev.stderr[-2000:]


def test_token_cli_needs_dev_mode(tmp_path: Path) -> None:
    prod = run_cli("token", "--user", "bob", env=clean_env(AGENTCHAT_DATA_DIR=str(tmp_path)))
    assert prod.returncode == 2 and not prod.stdout
    assert "AGENTCHAT_MODE=dev" in prod.stderr and "Traceback" not in prod.stderr
    dev = run_cli("token", "--user", "bob",
                  env=clean_env(AGENTCHAT_DATA_DIR=str(tmp_path), AGENTCHAT_MODE="dev"))
    assert dev.returncode == 0, dev.stderr
    assert dev.stdout.count(".") == 2  # a JWT


def test_agent_without_a_mode_has_no_demo_issuer(stack: Stack) -> None:
    """Started with no AGENTCHAT_MODE at all: production, so the page asks for a token instead
    of offering the demo users (and no dev issuer exists in the process)."""
    assert stack.sandbox and stack.policy
    port = free_port()
    env = {**stack.base_env(), "AGENTCHAT_AGENT_SSTOOLS_URL": stack.sandbox.url,
           "AGENTCHAT_AGENT_SERVICE_TOKEN_URL": stack.sandbox.url + "/api/auth/service-token",
           "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": CLIENT_SECRET,
           "AGENTCHAT_AGENT_POLICY_URL": stack.policy.url,
           "AGENTCHAT_USER_JWKS_PATH": str(stack.settings().user_jwks)}
    # The built-in page is off outside dev unless turned on (issue 31): on here, to see it ask
    # for a token.
    env["AGENTCHAT_AGENT_PAGE_ENABLED"] = "true"
    svc = Service(["serve", "--port", str(port)], env=env, port=port,
                  log=stack.data_dir / "agent-production.log")
    svc.env.pop("AGENTCHAT_MODE", None)
    svc.start(timeout=90)
    try:
        # The page's own app (the mount path redirects a browser there).
        config = httpx.get(svc.url + "/api/agent/gradio/page/config", timeout=10).text
        # No demo-user picker: no component labelled with that word (the page's translations
        # carry every word, so the text alone cannot tell), and the token box is there.
        labels = [str(c.get("props", {}).get("label"))
                  for c in json.loads(config)["components"]]  # i18n: '__i18n__{... "key": …}'
        assert not any('"key": "demo_user"' in label for label in labels), labels
        assert any('"key": "user_token"' in label for label in labels), labels
        # The REST API works with a token from the configured issuer's keys.
        mine = httpx.get(svc.url + "/api/assistant/conversations", timeout=10, headers={
            "Authorization": f"Bearer {stack.token('alice')}"})
        assert mine.status_code == 200, mine.text
    finally:
        svc.stop()


# --- the JWKS route ----------------------------------------------------------------------------


def test_jwks_route_is_public_and_serves_public_members_only(stack: Stack) -> None:
    path = stack.settings().jwks_path
    original = path.read_text()
    published = json.loads(original)
    leaky = {"keys": [{**published["keys"][0], "d": "PRIVATE-d", "p": "PRIVATE-p",
                       "q": "PRIVATE-q", "stage": "current", "since": 123},
                      {"kty": "RSA", "n": "AQAB-n", "e": "AQAB", "kid": "rsa-1", "alg": "RS256",
                       "use": "sig", "d": "PRIVATE-rsa-d", "dp": "x", "dq": "y", "qi": "z"}]}
    path.write_text(json.dumps(leaky))
    try:
        resp = httpx.get(stack.agent.url + "/api/agent/.well-known/jwks.json", timeout=10)
    finally:
        path.write_text(original)
    assert resp.status_code == 200  # no token: ss-tools fetches it
    keys = resp.json()["keys"]
    assert [k["kid"] for k in keys] == [published["keys"][0]["kid"], "rsa-1"]
    assert all(set(k) <= set(PUBLIC_JWK_MEMBERS) for k in keys), keys
    assert "PRIVATE" not in resp.text
    assert set(keys[0]) == {"kty", "crv", "x", "kid", "alg", "use"}
    assert set(keys[1]) == {"kty", "n", "e", "kid", "alg", "use"}
    # What we write ourselves (the operator's Secret and ConfigMap too) has no stage either.
    assert all(set(k) <= set(PUBLIC_JWK_MEMBERS) for k in published["keys"])


# --- llm-status -------------------------------------------------------------------------------


class _ModelsEndpoint:
    """A stand-in OpenAI-compatible endpoint that counts `GET /v1/models` (the probe) and
    answers it slowly, so concurrent probes would overlap."""

    def __init__(self, delay_s: float) -> None:
        self.count = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    with outer.lock:
                        outer.count += 1
                    time.sleep(delay_s)
                body = b'{"object": "list", "data": [{"id": "stub", "object": "model"}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def models_endpoint() -> Iterator[_ModelsEndpoint]:
    endpoint = _ModelsEndpoint(delay_s=0.5)
    yield endpoint
    endpoint.close()


def test_llm_status_needs_a_token_and_probes_once_per_interval(
        stack: Stack, models_endpoint: _ModelsEndpoint) -> None:
    agent = stack.start_agent(AGENTCHAT_AGENT_LLM="openai:stub-model",
                              AGENTCHAT_AGENT_LLM_BASE_URL=models_endpoint.url,
                              AGENTCHAT_AGENT_LLM_API_KEY="sk-local",
                              AGENTCHAT_AGENT_TUNING__LLM_STATUS_CACHE_S="30")
    try:
        url = agent.url + "/api/agent/llm-status"
        anonymous = httpx.get(url, timeout=10)
        assert anonymous.status_code == 401 and anonymous.json()["code"] == "UNAUTHORIZED"
        forged = httpx.get(url, timeout=10, headers={"Authorization": "Bearer not.a.jwt"})
        assert forged.status_code == 401
        assert models_endpoint.count == 0  # refused callers never reach the model endpoint

        auth = {"Authorization": f"Bearer {stack.token('alice')}"}

        async def many(n: int) -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as http:
                return list(await asyncio.gather(*(http.get(url, headers=auth)
                                                   for _ in range(n))))

        answers = asyncio.run(many(20))
        assert [r.status_code for r in answers] == [200] * 20
        bodies = [r.json() for r in answers]
        assert all(b["model"] == "openai:stub-model" and b["reachable"] for b in bodies)
        assert models_endpoint.count == 1, "20 concurrent requests share one in-flight probe"
        assert len({b["checked_at"] for b in bodies}) == 1
        # Within the interval: answered from the cache; /readyz shares it.
        assert httpx.get(url, headers=auth, timeout=10).json() == bodies[0]
        assert httpx.get(agent.url + "/readyz", timeout=10).status_code == 200
        assert models_endpoint.count == 1
    finally:
        agent.stop()


# --- the request-body limit ---------------------------------------------------------------------


def _conversations(stack: Stack, token: str) -> list[dict[str, Any]]:
    resp = httpx.get(stack.agent.url + "/api/assistant/conversations", timeout=30,
                     params={"limit": 100}, headers={"Authorization": f"Bearer {token}"})
    resp.raise_for_status()
    return list(resp.json()["items"])


def test_body_over_the_limit_is_413_and_stores_nothing(stack: Stack) -> None:
    token = stack.token(f"body-{uuid.uuid4().hex[:8]}", ["admin"])
    auth = {"Authorization": f"Bearer {token}"}
    base = stack.agent.url
    big = {"title": "x" * (1024 * 1024 + 10)}
    declared = httpx.post(base + "/api/assistant/conversations", json=big, headers=auth,
                          timeout=30)
    assert declared.status_code == 413, declared.text
    assert declared.json()["code"] == "INVALID_REQUEST" and "1048576" in declared.json()["detail"]

    def chunked() -> Iterator[bytes]:  # no Content-Length: the streamed size counts
        yield b'{"title": "'
        for _ in range(20):
            yield b"y" * 65536
        yield b'"}'

    streamed = httpx.post(base + "/api/assistant/conversations", content=chunked(),
                          headers={**auth, "Content-Type": "application/json"}, timeout=30)
    assert streamed.status_code == 413 and streamed.json()["code"] == "INVALID_REQUEST"
    # /chat bodies too (Gradio's queue/join JSON).
    join = httpx.post(base + "/api/agent/gradio/gradio_api/queue/join", headers=auth, timeout=30,
                      json={"data": [{"text": "z" * (1024 * 1024)}, None, None, None, None,
                                     None, None], "fn_index": 0, "session_hash": "big"})
    assert join.status_code == 413 and join.json()["code"] == "INVALID_REQUEST"
    assert _conversations(stack, token) == []

    # Under the limit works (a body far above the 16 KB text limit, but under 1 MB, reaches
    # the route and gets the route's own answer).
    ok = httpx.post(base + "/api/assistant/conversations", json={"title": "small"},
                    headers=auth, timeout=30)
    assert ok.status_code in (200, 201), ok.text
    assert [c["title"] for c in _conversations(stack, token)] == ["small"]
    under = httpx.post(base + "/api/assistant/conversations", json={"title": "t" * 500_000},
                       headers=auth, timeout=30)
    assert under.status_code != 413
    # The upload route is not under this limit: a file just under Gradio's own per-file limit
    # (1 MB) makes a multipart body over 1 MB, and it is accepted.
    upload = httpx.post(base + "/api/agent/gradio/gradio_api/upload", headers=auth, timeout=30,
                        files={"files": ("big.txt", b"u" * (1024 * 1024 - 50), "text/plain")})
    assert upload.status_code == 200, upload.text[:300]


# --- per-user limits on /chat -----------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(stack: Stack) -> Iterator[Service]:
    """An agent with low per-user limits and a slow model (so runs overlap)."""
    agent = stack.start_agent(AGENTCHAT_AGENT_TUNING__MAX_SUBMITS_PER_MINUTE_PER_USER="3",
                              AGENTCHAT_AGENT_TUNING__MAX_CONCURRENT_RUNS_PER_USER="2",
                              AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.05")
    yield agent
    agent.stop()


def _collect(client: Client, text: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ev in client.submit({"text": text}, api_name="/chat"):
        if not out or ev["metadata"]["seq"] > out[-1]["metadata"]["seq"]:
            out.append(ev)
    return out


def _client(agent: Service, token: str) -> Client:
    return Client(agent.url + "/api/agent/gradio/", headers={"Authorization": f"Bearer {token}"},
                  verbose=False)


def test_submits_per_minute_per_user(stack: Stack, limited: Service) -> None:
    user = f"rl-{uuid.uuid4().hex[:8]}"
    token = stack.token(user, ["admin"])
    client = _client(limited, token)
    for i in range(3):
        events = _collect(client, f"привет {i}")
        assert events[-1]["metadata"].get("message_id"), events[-1]
    before = _conversations(stack, token)
    assert len(before) == 3
    refused = _collect(client, "hello once more")  # an English turn keeps the server's detail
    meta = refused[-1]["metadata"]
    assert len(refused) == 1 and meta["type"] == "error", refused
    assert meta["code"] == "RATE_LIMITED" and meta["retryable"] is True
    assert "3 submits a minute" in meta["detail"]
    # Nothing ran and nothing was stored: no new conversation, no new message.
    assert _conversations(stack, token) == before
    cid = before[0]["id"]
    into = list(client.submit({"text": "в старый"}, None, cid, api_name="/chat"))
    assert into[-1]["metadata"]["code"] == "RATE_LIMITED"
    assert "запросов" in into[-1]["metadata"]["detail"]  # a Russian turn's words are Russian
    history = httpx.get(stack.agent.url + "/api/assistant/history", timeout=30,
                        params={"conversation_id": cid},
                        headers={"Authorization": f"Bearer {token}"}).json()
    assert "в старый" not in json.dumps(history, ensure_ascii=False)
    # Another user is unaffected.
    other = _collect(_client(limited, stack.token(f"rl-other-{uuid.uuid4().hex[:6]}",
                                                  ["admin"])), "привет")
    assert other[-1]["metadata"].get("message_id"), other[-1]


def test_concurrent_runs_per_user(stack: Stack, limited: Service) -> None:
    user = f"rc-{uuid.uuid4().hex[:8]}"
    token = stack.token(user, ["admin"])
    long_text = "Что ты умеешь?"  # a long answer: at 20 tokens/s it runs for seconds

    async def scenario() -> tuple[list[Any], Any, Any]:
        async with httpx.AsyncClient(timeout=120) as http:
            tabs = [RawChat(limited.url, token, http) for _ in range(3)]
            started = [asyncio.Event(), asyncio.Event()]

            def on_event(i: int) -> Any:
                return lambda out: started[i].set()

            runs = [asyncio.create_task(tabs[i].submit(long_text, on_event=on_event(i)))
                    for i in range(2)]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
            third = await tabs[2].submit("hello")  # both runs are streaming
            other = await RawChat(limited.url, stack.token(f"rc-other-{uuid.uuid4().hex[:6]}",
                                                           ["admin"]), http).submit("привет")
            return list(await asyncio.gather(*runs)), third, other

    runs, third, other = asyncio.run(scenario())
    assert third.kind == "error" and third.last["code"] == "RATE_LIMITED", third.types()
    assert third.last["retryable"] is True and "2 runs" in third.last["detail"]
    assert other.kind == "final", other.types()  # another user is unaffected
    assert [r.kind for r in runs] == ["final", "final"], [r.types() for r in runs]
    assert len(_conversations(stack, token)) == 2  # the refused submit stored nothing
    # The slots are freed when the runs' tasks end: a new submit is admitted again.
    deadline = time.monotonic() + 30
    while True:
        again = asyncio.run(_say(limited, token, "привет"))
        if again.kind == "final" or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the tasks may still be writing their records
    assert again.kind == "final", again.types()


async def _say(agent: Service, token: str, text: str) -> Any:
    async with httpx.AsyncClient(timeout=120) as http:
        return await RawChat(agent.url, token, http).submit(text)


# --- the operator's pre-publication floor ---------------------------------------------------


def test_pre_publication_floor_outside_dev() -> None:
    low = {"signingKeys": {"prePublicationSeconds": 3}}
    with pytest.raises(InvalidSpec, match="prePublicationSeconds: 3 is below 120"):
        parse_spec(low)
    with pytest.raises(InvalidSpec, match="below 120"):
        parse_spec({"signingKeys": {"prePublicationSeconds": PRE_PUBLICATION_FLOOR_S - 1}})
    assert parse_spec(low, dev=True).signing_keys.pre_publication_seconds == 3
    assert parse_spec({"signingKeys": {"prePublicationSeconds": 120}}
                      ).signing_keys.pre_publication_seconds == 120
    assert parse_spec({}).signing_keys.pre_publication_seconds == 780  # the default passes


def test_chart_values_refuse_a_short_pre_publication() -> None:
    default = matrix()["default"]
    sets = {"agentChat.spec.signingKeys.prePublicationSeconds": 30}
    with pytest.raises(HelmError) as refused:
        render(default, sets)
    assert "prePublicationSeconds" in str(refused.value) and "minimum" in str(refused.value)
    with pytest.raises(HelmError, match="schema"):
        lint(default, sets)
    docs = render(default, {"agentChat.spec.signingKeys.prePublicationSeconds": 120})
    spec = next(d for d in docs if d.get("kind") == "AgentChat")["spec"]
    assert spec["signingKeys"]["prePublicationSeconds"] == 120


def test_operator_without_a_mode_refuses_a_short_pre_publication(tmp_path: Path) -> None:
    """A real operator (kopf against kmock) with no AGENTCHAT_MODE: a spec below the floor is
    Ready=False/InvalidSpec and gets no keys; a default spec gets keys whose JWKS (Secret and
    ConfigMap) carries public members only."""
    cluster = KubeEmulator(tmp_path).start()
    port = free_port()
    svc = Service(["operator", "--standalone", "--host", "127.0.0.1", "--port", str(port)],
                  env={"KUBECONFIG": str(cluster.kubeconfig),
                       "AGENTCHAT_OPERATOR_TUNING__TICK_S": "0.3",
                       "AGENTCHAT_OPERATOR_TUNING__CONSISTENCY_TIMEOUT_S": "0",
                       "AGENTCHAT_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": ""},
                  port=port, ready_path="/healthz", log=tmp_path / "operator.log")
    svc.env.pop("AGENTCHAT_MODE", None)
    try:
        cluster.create_agentchat("team-a", "short", {"signingKeys": {
            "rotationIntervalSeconds": 600, "prePublicationSeconds": 3}})
        cluster.create_agentchat("team-a", "fine", {})
        svc.start()

        def ready(name: str, kind: str = "Ready") -> dict[str, Any]:
            obj = cluster.agentchat("team-a", name) or {}
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
            return conds.get(kind) or {}

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                ready("short").get("reason") == "InvalidSpec"
                and ready("fine").get("status") == "True"):
            time.sleep(0.2)
        assert ready("short").get("status") == "False", (ready("short"), svc.log_tail())
        assert ready("short")["reason"] == "InvalidSpec"
        assert "below 120" in ready("short", "KeysRotated")["message"]
        assert cluster.secret("team-a", "short-signing-keys") is None
        assert ready("fine").get("status") == "True", svc.log_tail()
        for text in (cluster.secret("team-a", "fine-jwks")["jwks.json"],
                     cluster.config_map("team-a", "fine-jwks")["jwks.json"]):
            keys = json.loads(text)["keys"]
            assert keys and all(set(k) <= set(PUBLIC_JWK_MEMBERS) for k in keys), keys
    finally:
        svc.stop()
        cluster.stop()
