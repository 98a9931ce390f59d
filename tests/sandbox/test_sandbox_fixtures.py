"""Fixtures the sandbox tests share: keys and tokens, one real `agentchat sandbox` process per
test module, and a client that resets the sandbox before each test.

Imported by the tests/test_sandbox_*.py modules (no tests here).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentchat.identity import DevUserIssuer
from agentchat.keys import KeyRing, ensure_ring, sign_service_token
from agentchat.settings import SharedSettings
from testkit.support import Service, free_port

TASK_STEP_S = 0.3


@dataclass
class Keys:
    settings: SharedSettings
    issuer: DevUserIssuer
    ring: KeyRing

    def service_token(self, subject: str = "agentchat-agent") -> str:
        return sign_service_token(self.ring, issuer=self.settings.service_issuer,
                                  audience=self.settings.service_audience, subject=subject)

    def headers(self, user: str = "alice", roles: list[str] | None = None,
                **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.service_token()}",
                "X-User-JWT": self.issuer.mint(user, roles), **extra}


class SandboxClient:
    """Calls the sandbox over HTTP as a user, the way the agent's tools do."""

    def __init__(self, url: str, keys: Keys) -> None:
        self.url = url
        self.keys = keys
        self.http = httpx.Client(base_url=url, timeout=30)

    def call(self, method: str, path: str, *, user: str = "alice",
             roles: list[str] | None = None, key: str | None = None,
             **kwargs: Any) -> httpx.Response:
        headers = self.keys.headers(user, roles)
        if key is not None:
            headers["Idempotency-Key"] = key
        headers.update(kwargs.pop("headers", {}))
        return self.http.request(method, path, headers=headers, **kwargs)

    def audit(self, **filters: str) -> list[dict[str, Any]]:
        r = self.http.get("/api/audit", params=filters, headers=self.keys.headers())
        assert r.status_code == 200, r.text
        return list(r.json()["items"])

    def outcomes(self, **filters: str) -> list[str]:
        return [i["outcome"] for i in self.audit(**filters)]

    def reset(self) -> None:
        assert self.http.post("/api/sandbox/reset").status_code == 200

    def fault(self, **fault: Any) -> None:
        r = self.http.post("/api/sandbox/faults", json=fault)
        assert r.status_code == 201, r.text


@pytest.fixture(scope="module")
def sandbox_keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    data_dir = tmp_path_factory.mktemp("sandbox-data")
    settings = SharedSettings(data_dir=data_dir, mode="dev")
    ring = ensure_ring(settings.keys_dir, settings.jwks_path)
    return Keys(settings=settings, issuer=DevUserIssuer(settings), ring=ring)


def sandbox_env(keys: Keys, **extra: str) -> dict[str, str]:
    return {"AGENTCHAT_DATA_DIR": str(keys.settings.data_dir), "AGENTCHAT_MODE": "dev",
            "AGENTCHAT_SANDBOX_TASK_STEP_S": str(TASK_STEP_S), **extra}


@pytest.fixture(scope="module")
def sandbox_service(sandbox_keys: Keys,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    log = tmp_path_factory.mktemp("sandbox-log") / "sandbox.log"
    port = free_port()
    svc = Service(["sandbox", "--port", str(port)], env=sandbox_env(sandbox_keys), port=port,
                  log=log)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
def api(sandbox_service: Service, sandbox_keys: Keys) -> Iterator[SandboxClient]:
    client = SandboxClient(sandbox_service.url, sandbox_keys)
    client.reset()
    yield client
    client.http.close()


def log_of(svc: Service) -> str:
    return svc.log_path.read_text(errors="replace") if isinstance(svc.log_path, Path) else ""
