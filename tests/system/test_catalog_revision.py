"""One catalog revision for the decision and the request (issue 31, hole 7).

The sidecar reloads the catalog live; the agent used to load it once, so after an edit the
decision and the request built could come from different revisions (a changed path or
method would run unjudged). Now every check carries the agent's revision (a digest of the
file), the sidecar refuses another one than it serves (POLICY_UNAVAILABLE, retryable,
nothing runs) and the agent reloads its file when it changes.

Kubelet updates each container's ConfigMap mount on its own, so the agent and the sidecar
here read two copies of the catalog, edited one at a time: either may be ahead.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentchat.catalog import catalog_revision
from agentchat.settings import PACKAGE_DATA
from testkit.policy import PolicyClient
from testkit.raw_chat import Outcome
from testkit.reliability import say
from testkit.stack import Stack, stack_on_own_database
from testkit.support import Service, script_model, stub_model_env

DEPLOY = {"name": "deploy_dashboard", "args": {"dashboard_id": 42, "env_id": "ss-dev"}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("revision")
    sidecars = tmp / "sidecar-catalog"
    sidecars.mkdir()
    shutil.copy(PACKAGE_DATA / "catalog.yaml", sidecars / "catalog.yaml")
    with stack_on_own_database(pg_server, migrated_template, tmp,
                               catalog_path=sidecars / "catalog.yaml") as s:
        yield s


@pytest.fixture(scope="module")
def agents_catalog(stack: Stack) -> Path:
    folder = stack.data_dir.parent / "agent-catalog"
    folder.mkdir()
    shutil.copy(PACKAGE_DATA / "catalog.yaml", folder / "catalog.yaml")
    return folder / "catalog.yaml"


@pytest.fixture(scope="module")
def agent(stack: Stack, model: Service, agents_catalog: Path) -> Iterator[Service]:
    svc = stack.start_agent(AGENTCHAT_CATALOG_PATH=str(agents_catalog),
                            AGENTCHAT_AGENT_TUNING__CATALOG_CHECK_S="0.2", **stub_model_env(model))
    yield svc
    svc.stop()


def sidecar_catalog(stack: Stack) -> Path:
    assert stack.catalog_path is not None
    return stack.catalog_path


def edit(path: Path, note: str) -> str:
    """A comment added: a new revision that changes no tool; returns the new revision."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(path.read_text() + f"\n# {note}\n")
    tmp.replace(path)  # atomic, like kubelet's swap
    return catalog_revision(path.read_bytes())


def wait_until(predicate: object, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def sidecar_serves(stack: Stack, revision: str) -> bool:
    """The sidecar answers a check made against `revision` (it has reloaded to it)."""
    resp = PolicyClient(stack.policy.url, stack.service_token()).check(  # type: ignore[union-attr]
        stack.token("alice"), "search_dashboards", "ss-dev", body={
            "request_id": "probe", "environment": "ss-dev", "tool": "search_dashboards",
            "arguments": {"query": "x", "env_id": "ss-dev"}, "catalog_revision": revision})
    return resp.status_code == 200


def agent_serves(agent: Service, revision: str) -> bool:
    assert agent.log_path is not None
    return f"catalog revision {revision} loaded" in agent.log_path.read_text()


def deploy(stack: Stack, agent: Service, model: Service) -> Outcome:
    script_model(model, [DEPLOY])
    out = say(agent, stack.token("alice"), "задеплой дашборд в ss-dev", timeout=60)
    assert out.kind in ("final", "error"), out.types()
    return out


def deploys(stack: Stack) -> int:
    return len([a for a in stack.audit(operation="deploy_dashboard")])


def test_the_sidecar_refuses_a_check_against_another_revision(stack: Stack) -> None:
    served = catalog_revision(sidecar_catalog(stack).read_bytes())
    assert sidecar_serves(stack, served)
    client = PolicyClient(stack.policy.url, stack.service_token())  # type: ignore[union-attr]
    body = {"request_id": "r1", "environment": "ss-dev", "tool": "search_dashboards",
            "arguments": {"query": "x", "env_id": "ss-dev"}, "catalog_revision": "0" * 16}
    resp = client.check(stack.token("alice"), "search_dashboards", body=body)
    assert resp.status_code == 409, resp.text
    assert resp.json()["code"] == "POLICY_UNAVAILABLE"
    assert served in resp.json()["detail"]


def test_no_request_is_built_from_a_revision_the_sidecar_did_not_judge(
        stack: Stack, agent: Service, model: Service, agents_catalog: Path) -> None:
    stack.reset_sandbox()
    # The control: one catalog on both sides, the uncarded ss-dev deploy runs.
    assert deploy(stack, agent, model).kind == "final"
    assert deploys(stack) == 1
    # The agent's mount updated first: its checks carry the new revision, the sidecar's is old.
    ahead = edit(agents_catalog, "the agent's copy, edit 1")
    wait_until(lambda: agent_serves(agent, ahead), "the agent reloads its catalog")
    out = deploy(stack, agent, model)
    assert out.last["code"] == "POLICY_UNAVAILABLE" and out.last["retryable"], out.last
    assert "tool_start" not in out.types()
    assert deploys(stack) == 1, "nothing ran"
    # Now the sidecar's is ahead (edits 1 and 2), the agent's behind (edit 1).
    shutil.copy(agents_catalog, sidecar_catalog(stack))
    newer = edit(sidecar_catalog(stack), "the sidecar's copy, edit 2")
    wait_until(lambda: sidecar_serves(stack, newer), "the sidecar reloads its catalog")
    out = deploy(stack, agent, model)
    assert out.last["code"] == "POLICY_UNAVAILABLE", out.last
    assert deploys(stack) == 1, "nothing ran"
    # Both at the same revision again: calls run.
    shutil.copy(sidecar_catalog(stack), agents_catalog.with_suffix(".new"))
    agents_catalog.with_suffix(".new").replace(agents_catalog)
    wait_until(lambda: agent_serves(agent, newer), "the agent reloads its catalog")
    assert deploy(stack, agent, model).kind == "final"
    assert deploys(stack) == 2
