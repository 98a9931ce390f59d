"""Helpers for the policy sidecar tests: a ConfigMap-like policy folder and an HTTP client."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from testkit.support import free_port, running
from testkit.synthetic_policies import SHIPPED_POLICY

POLICY_FILES = ("model.conf", "policy.csv", "tests")


def configmap_folder(root: Path, source: Path = SHIPPED_POLICY) -> Path:
    """A folder laid out the way kubelet mounts a ConfigMap: files are symlinks into
    `..data`, itself a symlink to a timestamped folder that is swapped atomically."""
    root.mkdir(parents=True)
    version = "..v" + uuid.uuid4().hex[:8]
    shutil.copytree(source, root / version)
    (root / "..data").symlink_to(version)
    for name in POLICY_FILES:
        (root / name).symlink_to(f"..data/{name}")
    return root


def swap_configmap(root: Path, edit: Callable[[Path], None]) -> None:
    """Copy the live version, edit the copy, swap `..data` in one rename and delete the old
    version, as kubelet does."""
    current = root / os.readlink(root / "..data")
    version = "..v" + uuid.uuid4().hex[:8]
    shutil.copytree(current, root / version)
    edit(root / version)
    tmp = root / "..data_tmp"
    tmp.symlink_to(version)
    os.rename(tmp, root / "..data")
    shutil.rmtree(current)  # kubelet removes the old version right after the swap


class PolicyClient:
    def __init__(self, url: str, service_token: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)
        self.service_token = service_token

    def check(self, user_token: str | None, tool: str, env: str | None = None,
              *, service_token: str | None = None, body: Any = None,
              context: dict[str, Any] | None = None, **arguments: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {service_token or self.service_token}"}
        if user_token is not None:
            headers["X-User-JWT"] = user_token
        if body is None:
            body = {"request_id": "req-" + uuid.uuid4().hex[:8], "environment": env,
                    "tool": tool, "arguments": arguments}
            if context is not None:
                body["context"] = context
        return self.http.post("/v1/check", json=body, headers=headers)

    def post(self, path: str, user_token: str | None, body: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.service_token}"}
        if user_token is not None:
            headers["X-User-JWT"] = user_token
        return self.http.post(path, json=body, headers=headers)

    def readyz(self) -> dict[str, Any]:
        return dict(self.http.get("/readyz").json())

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool],
                 timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.readyz()
            if predicate(state):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"readyz never matched: {state}")
            time.sleep(0.1)


@contextmanager
def sidecar(data_dir: Path, policy_dir: Path, log_dir: Path,
            ready_path: str = "/readyz", **extra_env: str) -> Iterator[Any]:
    port = free_port()
    env = {
        "AGENTCHAT_DATA_DIR": str(data_dir),
        "AGENTCHAT_MODE": "dev",
        "AGENTCHAT_POLICY_DIR": str(policy_dir),
        "AGENTCHAT_POLICY_PORT": str(port),
        "AGENTCHAT_POLICY_TUNING__RELOAD_DEBOUNCE_MS": "50",
        "AGENTCHAT_POLICY_TUNING__RELOAD_POLL_S": "1",
        "AGENTCHAT_POLICY_DECISION_LOG_PATH": str(log_dir / "decisions.jsonl"),
        **extra_env,
    }
    with running(["policy", "serve"], env=env, port=port, ready_path=ready_path,
                 log=log_dir / "sidecar.log") as svc:
        yield svc
