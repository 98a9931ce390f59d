"""`Idempotency-Key` on the sandbox's write and destructive tools, over HTTP: the same key gives
the same result and executes once (one "ok" audit record), also under concurrency and after an
injected gateway failure."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import test_sandbox_fixtures as fx
from test_sandbox_fixtures import SandboxClient

api, sandbox_keys, sandbox_service = fx.api, fx.sandbox_keys, fx.sandbox_service

DEPLOY = "/api/dashboards/42/deploy"


def test_repeated_key_executes_once(api: SandboxClient) -> None:
    first = api.call("POST", DEPLOY, json={"env_id": "prod"}, key="card-1")
    again = api.call("POST", DEPLOY, json={"env_id": "prod"}, key="card-1")
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert api.outcomes(operation="deploy_dashboard") == ["ok", "replayed"]
    assert [i["idempotency_key"] for i in api.audit()] == ["card-1", "card-1"]
    # One execution: one task, which really ran.
    task_id = first.json()["task_id"]
    assert api.call("GET", f"/api/tasks/{task_id}").status_code == 200


def test_same_key_with_other_arguments_is_refused(api: SandboxClient) -> None:
    assert api.call("POST", DEPLOY, json={"env_id": "ss-dev"}, key="k").status_code == 202
    other = api.call("POST", DEPLOY, json={"env_id": "ss-stage"}, key="k")
    assert other.status_code == 422 and other.json()["code"] == "INVALID_REQUEST"
    other_tool = api.call("POST", "/api/maintenance", json={"env_id": "ss-dev"}, key="k")
    assert other_tool.status_code == 422
    assert api.outcomes(outcome="ok") == ["ok"]


def test_same_key_from_another_user_is_refused(api: SandboxClient) -> None:
    assert api.call("POST", DEPLOY, json={"env_id": "ss-dev"}, key="k2").status_code == 202
    bob = api.call("POST", DEPLOY, json={"env_id": "ss-dev"}, key="k2", user="bob")
    assert bob.status_code == 422
    assert api.outcomes(operation="deploy_dashboard") == ["ok", "error"]


def test_concurrent_requests_with_one_key_execute_once(api: SandboxClient) -> None:
    n = 16
    headers = api.keys.headers("bob", **{"Idempotency-Key": "race"})
    start = threading.Barrier(n)

    def deploy(_: int) -> httpx.Response:
        with httpx.Client(base_url=api.url, timeout=30) as c:
            c.get("/livez")  # connect first, so the posts leave together
            start.wait()
            return c.post(DEPLOY, json={"env_id": "ss-stage"}, headers=headers)

    with ThreadPoolExecutor(max_workers=n) as pool:
        replies = list(pool.map(deploy, range(n)))
    assert {r.status_code for r in replies} == {202}
    assert len({r.json()["task_id"] for r in replies}) == 1
    outcomes = api.outcomes(operation="deploy_dashboard")
    assert outcomes.count("ok") == 1 and outcomes.count("replayed") == n - 1


def test_without_a_key_each_write_executes(api: SandboxClient) -> None:
    a = api.call("POST", DEPLOY, json={"env_id": "ss-dev"})
    b = api.call("POST", DEPLOY, json={"env_id": "ss-dev"})
    assert a.json()["task_id"] != b.json()["task_id"]
    assert api.outcomes() == ["ok", "ok"]


def test_injected_502_is_not_stored_so_the_retry_executes_once(api: SandboxClient) -> None:
    api.fault(operation="deploy_dashboard", status=502, times=1)
    failed = api.call("POST", DEPLOY, json={"env_id": "ss-dev"}, key="retry-me")
    assert failed.status_code == 502
    retried = api.call("POST", DEPLOY, json={"env_id": "ss-dev"}, key="retry-me")
    replayed = api.call("POST", DEPLOY, json={"env_id": "ss-dev"}, key="retry-me")
    assert retried.status_code == replayed.status_code == 202
    assert retried.json() == replayed.json()
    assert api.outcomes() == ["error", "ok", "replayed"]


def test_destructive_replay_returns_the_first_result(api: SandboxClient) -> None:
    args = {"env_id": "ss-dev"}
    first = api.call("DELETE", "/api/dashboards/7", params=args, key="del-7")
    again = api.call("DELETE", "/api/dashboards/7", params=args, key="del-7")
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() and first.json()["deleted"] is True
    # A new key is a new request: the dashboard is gone now.
    fresh = api.call("DELETE", "/api/dashboards/7", params=args, key="del-7b")
    assert fresh.status_code == 404 and fresh.json()["code"] == "NOT_FOUND"
    assert api.outcomes() == ["ok", "replayed", "not_found"]


def test_an_error_result_is_replayed_too(api: SandboxClient) -> None:
    """A refused execution (not a transient fault) is the request's result: replayed as is."""
    a = api.call("POST", "/api/maintenance/2/end", json={"env_id": "prod"}, key="end")
    b = api.call("POST", "/api/maintenance/2/end", json={"env_id": "prod"}, key="end")
    assert a.status_code == b.status_code == 404
    assert api.outcomes() == ["not_found", "replayed"]


def test_reads_ignore_the_key(api: SandboxClient) -> None:
    for _ in range(2):
        assert api.call("GET", "/api/environments", key="read").status_code == 200
    assert api.outcomes() == ["ok", "ok"]
