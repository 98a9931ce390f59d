"""The sandbox's endpoints over HTTP: one per catalog tool, RBAC per environment, argument
validation, seeded data and search, asynchronous tasks, faults and reset."""

from __future__ import annotations

import time
from typing import Any

import pytest
import test_sandbox_fixtures as fx
from test_sandbox_fixtures import TASK_STEP_S, SandboxClient

from agentchat.catalog import Tool, load_catalog
from agentchat.settings import SharedSettings

api, sandbox_keys, sandbox_service = fx.api, fx.sandbox_keys, fx.sandbox_service
CATALOG = load_catalog(SharedSettings().catalog_path)

# A valid call of every shipped tool (alice is admin everywhere).
EXAMPLES: dict[str, dict[str, Any]] = {
    "show_capabilities": {},
    "list_environments": {},
    "search_dashboards": {"query": "energy", "env_id": "prod"},
    "get_dashboard": {"dashboard_id": 42},
    "get_health_summary": {"env_id": "prod", "dashboard_id": 42},
    "export_config": {"dashboard_id": 42, "env_id": "ss-dev"},
    "deploy_dashboard": {"dashboard_id": 42, "env_id": "ss-dev"},
    "delete_dashboard": {"dashboard_id": 1, "env_id": "ss-dev"},
    "list_maintenance_events": {"env_id": "prod"},
    "start_maintenance": {"env_id": "ss-dev", "reason": "test", "duration_minutes": 30},
    "end_maintenance": {"event_id": 2, "env_id": "ss-stage"},
    "list_databases": {"env_id": "prod"},
    "superset_explore_database": {"database_id": 4, "env_id": "prod"},
    "search_datasets": {"query": "энергия", "env_id": "prod"},
    "refresh_dataset": {"dataset_id": 8, "env_id": "ss-dev"},
    "start_migration": {"dashboard_id": 42, "source_env": "ss-dev", "target_env": "ss-stage"},
    "list_migrations": {"env_id": "ss-stage"},
    "get_task_status": {"task_id": "task-seed-1"},
}


def call_tool(api: SandboxClient, tool: Tool, args: dict[str, Any], **kw: Any) -> Any:
    """The agent's calling convention: path parameters, then query (GET/DELETE) or JSON body."""
    path, rest = tool.path, dict(args)
    for name in tool.path_params():
        path = path.replace("{" + name + "}", str(rest.pop(name)))
    if tool.method in ("GET", "DELETE"):
        return api.call(tool.method, path, params=rest, **kw)
    return api.call(tool.method, path, json=rest, **kw)


def tool(name: str) -> Tool:
    t = CATALOG.get(name)
    assert t is not None
    return t


@pytest.mark.parametrize("name", CATALOG.names)
def test_every_catalog_tool_has_a_working_route(api: SandboxClient, name: str) -> None:
    assert name in EXAMPLES, f"add an example call of the new catalog tool {name}"
    r = call_tool(api, tool(name), EXAMPLES[name], key=f"example-{name}")
    assert 200 <= r.status_code < 300, r.text
    assert isinstance(r.json(), dict)
    assert api.outcomes(operation=name) == ["ok"]


def test_openapi_lists_every_tool_route(api: SandboxClient) -> None:
    paths = api.http.get("/api/openapi.json").json()["paths"]
    for t in CATALOG.tools:
        assert t.method.lower() in paths[t.path], t.name


@pytest.mark.parametrize(("user", "name", "args", "allowed"), [
    ("bob", "deploy_dashboard", {"dashboard_id": 42, "env_id": "prod"}, False),
    ("bob", "deploy_dashboard", {"dashboard_id": 42, "env_id": "ss-stage"}, True),
    ("carol", "deploy_dashboard", {"dashboard_id": 42, "env_id": "ss-dev"}, False),
    ("carol", "get_dashboard", {"dashboard_id": 42}, True),
    ("bob", "delete_dashboard", {"dashboard_id": 42, "env_id": "ss-dev"}, False),
    ("alice", "delete_dashboard", {"dashboard_id": 42, "env_id": "prod"}, True),
    # A migration: read on the source, write on the target.
    ("bob", "start_migration", {"dashboard_id": 42, "source_env": "ss-dev",
                                "target_env": "prod"}, False),
    ("bob", "start_migration", {"dashboard_id": 42, "source_env": "prod",
                                "target_env": "ss-stage"}, True),
    ("carol", "start_migration", {"dashboard_id": 42, "source_env": "prod",
                                  "target_env": "ss-dev"}, False),
])
def test_rbac_per_environment(api: SandboxClient, user: str, name: str, args: dict[str, Any],
                              allowed: bool) -> None:
    r = call_tool(api, tool(name), args, user=user, key="rbac")
    audit = api.audit()
    assert len(audit) == 1 and audit[0]["user_actor"] == user
    if allowed:
        assert r.status_code < 300, r.text
        assert audit[0]["outcome"] == "ok"
    else:
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
        assert audit[0]["outcome"] == "forbidden"


def test_scoped_viewer_sees_only_their_environments(api: SandboxClient) -> None:
    r = api.call("GET", "/api/dashboards/42", user="dave", roles=["viewer@ss-dev"])
    assert r.status_code == 200 and set(r.json()["envs"]) == {"ss-dev"}
    elsewhere = api.call("GET", "/api/dashboards", user="dave", roles=["viewer@ss-dev"],
                         params={"env_id": "prod"})
    assert elsewhere.status_code == 403
    assert api.call("GET", "/api/health", user="dave", roles=["viewer@ss-dev"],
                    params={"env_id": "prod"}).status_code == 403
    nobody = api.call("GET", "/api/environments", user="eve", roles=[])
    assert nobody.status_code == 403


def test_unknown_environment_is_refused_by_the_schema(api: SandboxClient) -> None:
    # The catalog's environment arguments enumerate its environments (issue 15).
    r = api.call("GET", "/api/dashboards", params={"env_id": "moon"})
    assert r.status_code == 422 and r.json()["code"] == "INVALID_REQUEST"
    assert api.outcomes() == ["error"]


@pytest.mark.parametrize(("method", "path", "kw"), [
    ("GET", "/api/dashboards/abc", {}),
    ("GET", "/api/dashboards/0", {}),
    ("GET", "/api/dashboards", {"params": {"colour": "red"}}),
    ("GET", "/api/health", {}),
    ("POST", "/api/dashboards/42/deploy", {"content": b"{not json"}),
    ("POST", "/api/dashboards/42/deploy", {"json": ["prod"]}),
    ("POST", "/api/dashboards/42/deploy", {"json": {"env_id": 5}}),
    ("POST", "/api/dashboards/42/deploy", {"params": {"env_id": "ss-dev"}}),
    ("POST", "/api/dashboards/42/deploy", {"json": {"env_id": "ss-dev", "dashboard_id": 7}}),
])
def test_invalid_arguments_are_422_and_nothing_runs(api: SandboxClient, method: str, path: str,
                                                    kw: dict[str, Any]) -> None:
    r = api.call(method, path, **kw)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "INVALID_REQUEST" and r.json()["detail"]
    assert api.outcomes() == ["error"]


def test_query_values_are_coerced_and_nulls_dropped(api: SandboxClient) -> None:
    r = api.call("GET", "/api/health", params={"env_id": "prod", "dashboard_id": "42"})
    assert r.status_code == 200 and r.json()["dashboard_id"] == 42
    r = api.call("POST", "/api/dashboards/42/deploy", json={"env_id": "ss-dev", "version": None})
    assert r.status_code == 202
    assert api.audit()[0]["args"] == {"env_id": "prod", "dashboard_id": 42}


def test_seeded_dashboards(api: SandboxClient) -> None:
    items = api.call("GET", "/api/dashboards", params={"env_id": "ss-dev"}).json()["items"]
    assert len(items) >= 40
    assert all(i["title"] and i["title_en"] for i in items)
    d42 = api.call("GET", "/api/dashboards/42").json()
    assert d42["title"] == "Отчёт по энергопотреблению"
    assert set(d42["envs"]) == {"ss-dev", "ss-stage", "prod"}
    assert {"version", "health"} <= set(d42["envs"]["prod"])


@pytest.mark.parametrize("query", ["энергопотребление", "ОТЧЕТ по энергопотреблению",
                                   "отчёт энергопотребление", "Energy consumption", "ENERGY"])
def test_search_matches_words_in_both_languages(api: SandboxClient, query: str) -> None:
    r = api.call("GET", "/api/dashboards", params={"query": query, "env_id": "prod"})
    assert 42 in [i["id"] for i in r.json()["items"]]


def test_search_ranks_by_matched_words(api: SandboxClient) -> None:
    ids = [i["id"] for i in api.call("GET", "/api/dashboards",
                                     params={"query": "energy report", "env_id": "prod"}
                                     ).json()["items"]]
    assert ids == [42]
    assert api.call("GET", "/api/dashboards", params={"query": "zzzz", "env_id": "prod"}
                    ).json()["items"] == []
    ds = api.call("GET", "/api/datasets", params={"query": "электроэнергии", "env_id": "prod"}
                  ).json()["items"]
    assert [d["name"] for d in ds] == ["energy_consumption"]


def _wait_task(api: SandboxClient, task_id: str) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + 20 * TASK_STEP_S + 10
    while time.monotonic() < deadline:
        status = api.call("GET", f"/api/tasks/{task_id}").json()["status"]
        if not seen or seen[-1] != status:
            seen.append(status)
        if status in ("succeeded", "failed"):
            return seen
        time.sleep(TASK_STEP_S / 5)
    raise AssertionError(f"task {task_id} stuck: {seen}")


def test_deploy_task_advances_and_updates_the_version(api: SandboxClient) -> None:
    before = api.call("GET", "/api/dashboards/42").json()
    started = api.call("POST", "/api/dashboards/42/deploy", json={"env_id": "prod"}, key="d")
    assert started.status_code == 202 and started.json()["status"] == "queued"
    new_version = started.json()["version"]
    assert new_version != before["envs"]["prod"]["version"]
    assert _wait_task(api, started.json()["task_id"]) == ["queued", "running", "succeeded"]
    after = api.call("GET", "/api/dashboards/42").json()
    assert after["envs"]["prod"]["version"] == new_version


def test_migration_copies_the_dashboard(api: SandboxClient) -> None:
    assert "ss-stage" not in api.call("GET", "/api/dashboards/9").json()["envs"]
    r = api.call("POST", "/api/migrations", key="m",
                 json={"dashboard_id": 9, "source_env": "ss-dev", "target_env": "ss-stage"})
    assert r.status_code == 202
    assert _wait_task(api, r.json()["task_id"])[-1] == "succeeded"
    assert "ss-stage" in api.call("GET", "/api/dashboards/9").json()["envs"]
    migs = api.call("GET", "/api/migrations", params={"env_id": "ss-stage"}).json()["items"]
    assert migs[-1]["dashboard_id"] == 9 and migs[-1]["status"] == "succeeded"


def test_delete_really_removes(api: SandboxClient) -> None:
    r = api.call("DELETE", "/api/dashboards/42", params={"env_id": "ss-stage"}, key="x")
    assert r.status_code == 200
    left = api.call("GET", "/api/dashboards/42").json()["envs"]
    assert "ss-stage" not in left and "prod" in left
    gone = api.call("GET", "/api/health", params={"env_id": "ss-stage", "dashboard_id": 42})
    assert gone.status_code == 404 and gone.json()["code"] == "NOT_FOUND"


def test_maintenance_window_lifecycle(api: SandboxClient) -> None:
    started = api.call("POST", "/api/maintenance", json={"env_id": "ss-dev", "reason": "r"})
    assert started.status_code == 201 and started.json()["status"] == "active"
    twice = api.call("POST", "/api/maintenance", json={"env_id": "ss-dev"})
    assert twice.status_code == 422
    event_id = started.json()["id"]
    ended = api.call("POST", f"/api/maintenance/{event_id}/end", json={"env_id": "ss-dev"})
    assert ended.status_code == 200 and ended.json()["status"] == "ended"


def test_capabilities_list_the_catalog(api: SandboxClient) -> None:
    body = api.call("GET", "/api/capabilities", user="bob").json()
    by_name = {t["name"]: t for t in body["tools"]}
    assert set(by_name) == set(CATALOG.names)
    assert by_name["deploy_dashboard"]["description"]["ru"]
    assert by_name["deploy_dashboard"]["allowed_envs"] == ["ss-dev", "ss-stage"]
    assert by_name["delete_dashboard"]["allowed_envs"] == []


def test_faults_fail_delay_and_garble(api: SandboxClient) -> None:
    api.fault(operation="list_environments", status=502, times=2)
    api.fault(operation="list_environments", delay_s=0.5)
    assert len(api.http.get("/api/sandbox/faults").json()["items"]) == 2
    t0 = time.monotonic()
    statuses = [api.call("GET", "/api/environments").status_code for _ in range(3)]
    assert statuses == [502, 502, 200]
    assert time.monotonic() - t0 >= 0.5  # the delay came third, then the call ran
    api.fault(operation="list_environments", garbage=True)
    garbage = api.call("GET", "/api/environments")
    assert garbage.status_code == 200
    with pytest.raises(ValueError):
        garbage.json()
    assert api.http.get("/api/sandbox/faults").json()["items"] == []
    assert api.outcomes() == ["error", "error", "ok", "error"]


def test_fault_for_unknown_operation_is_refused(api: SandboxClient) -> None:
    r = api.http.post("/api/sandbox/faults", json={"operation": "nope", "status": 502})
    assert r.status_code == 422 and r.json()["code"] == "INVALID_REQUEST"


def test_reset_reseeds_and_clears(api: SandboxClient) -> None:
    api.call("DELETE", "/api/dashboards/42", params={"env_id": "prod"})
    api.fault(operation="get_dashboard", status=503)
    api.reset()
    assert api.audit() == []
    assert api.http.get("/api/sandbox/faults").json()["items"] == []
    assert "prod" in api.call("GET", "/api/dashboards/42").json()["envs"]


def test_probes(api: SandboxClient) -> None:
    assert api.http.get("/livez").status_code == 200
    ready = api.http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["tools"] == len(CATALOG.tools)


@pytest.mark.parametrize("traceparent, kept", [
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
     "4bf92f3577b34da6a3ce929d0e0e4736"),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
     "4bf92f3577b34da6a3ce929d0e0e4736"),
    (None, None),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),  # invalid by the spec
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", None),  # upper case
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'; DROP", None),
    ("x" * 5000, None),
])
def test_the_audit_keeps_only_a_valid_traceparents_trace_id(
        api: SandboxClient, traceparent: str | None, kept: str | None) -> None:
    headers = {"traceparent": traceparent} if traceparent is not None else {}
    resp = call_tool(api, tool("get_dashboard"), {"dashboard_id": 42}, headers=headers)
    assert resp.status_code == 200, resp.text
    assert api.audit(operation="get_dashboard")[-1]["trace_id"] == kept
