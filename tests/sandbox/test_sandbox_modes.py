"""The sandbox outside dev mode: no fault injection or reset, no placeholder client secret, and
settings that would enable them refuse to start (without echoing the secret)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest
import test_sandbox_fixtures as fx
from test_sandbox_fixtures import Keys, sandbox_env

from testkit.support import AGENTCHAT, ROOT, Service, free_port

sandbox_keys = fx.sandbox_keys
SECRET = "a-real-secret-for-this-test"


def _production_env(keys: Keys, **extra: str) -> dict[str, str]:
    return sandbox_env(keys, AGENTCHAT_MODE="production", **extra)


def test_production_mode_has_no_sandbox_endpoints(sandbox_keys: Keys, tmp_path: Path) -> None:
    port = free_port()
    env = _production_env(sandbox_keys, AGENTCHAT_SANDBOX_CLIENT_SECRET=SECRET)
    with Service(["sandbox", "--port", str(port)], env=env, port=port,
                 log=tmp_path / "log") as svc:
        assert httpx.post(svc.url + "/api/sandbox/reset").status_code == 404
        assert httpx.post(svc.url + "/api/sandbox/faults",
                          json={"operation": "list_environments", "status": 502}
                          ).status_code == 404
        placeholder = httpx.post(svc.url + "/api/auth/service-token", json={
            "client_id": "agentchat-agent", "client_secret": "dev-client-secret"})
        assert placeholder.status_code == 401
        token = httpx.post(svc.url + "/api/auth/service-token", json={
            "client_id": "agentchat-agent", "client_secret": SECRET}).json()["access_token"]
        r = httpx.get(svc.url + "/api/environments", headers={
            "Authorization": f"Bearer {token}",
            "X-User-JWT": sandbox_keys.issuer.mint("carol")})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(("extra", "message"), [
    ({}, "AGENTCHAT_SANDBOX_CLIENT_SECRET"),
    ({"AGENTCHAT_SANDBOX_CLIENT_SECRET": "dev-client-secret"}, "AGENTCHAT_SANDBOX_CLIENT_SECRET"),
    ({"AGENTCHAT_SANDBOX_CLIENT_SECRET": SECRET, "AGENTCHAT_SANDBOX_FAULTS_ENABLED": "true"},
     "AGENTCHAT_SANDBOX_FAULTS_ENABLED"),
])
def test_production_mode_refuses_unsafe_settings(sandbox_keys: Keys, extra: dict[str, str],
                                                 message: str) -> None:
    env = {**os.environ, **_production_env(sandbox_keys, **extra)}
    proc = subprocess.run([AGENTCHAT, "sandbox", "--port", str(free_port())], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert SECRET not in proc.stderr + proc.stdout


def test_broken_catalog_stops_the_start(sandbox_keys: Keys, tmp_path: Path) -> None:
    broken = tmp_path / "catalog.yaml"
    broken.write_text("version: 1\nenvironments: [ss-dev]\ntools:\n  - name: x\n")
    env = {**os.environ, **sandbox_env(sandbox_keys, AGENTCHAT_CATALOG_PATH=str(broken))}
    proc = subprocess.run([AGENTCHAT, "sandbox", "--port", str(free_port())], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert str(broken) in proc.stderr
