"""Every series the chart's dashboard and alert rules name is served by a component's
/metrics after a test turn (issue 20 item 3): the agent and its sidecar as real processes, the
operator under kopf against kmock's Kubernetes API emulator, pruning the stack's database.

A series counts as served when its `# TYPE` line is on the page (a labelled metric with no
sample yet still declares itself); the ones a turn with a tool call and a card must have
moved are checked for samples, and no series carries a user or conversation id.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from agentchat.operator import constants as c
from testkit.kube_emulator import KubeEmulator
from testkit.monitoring import exposed, used_names
from testkit.raw_chat import RawChat
from testkit.stack import Stack
from testkit.support import Service, free_port

NS = "team-a"


def _page(url: str) -> str:
    resp = httpx.get(url + "/metrics", timeout=5)
    resp.raise_for_status()
    return resp.text


def _sample(page: str, name: str, **labels: str) -> float | None:
    for line in page.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module")
def turned(stack: Stack) -> Stack:
    """One turn with a tool call and a card (the prefetch of dashboard 42, its deploy to prod)."""
    async def go() -> None:
        async with httpx.AsyncClient() as http:
            out = await RawChat(stack.agent.url, stack.token("alice"), http).submit(
                "задеплой дашборд 42 в прод")
            assert out.kind == "confirm_required", out.types()

    asyncio.run(go())
    return stack


@pytest.fixture(scope="module")
def operator_run(turned: Stack, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[KubeEmulator, str, str]]:
    """The operator serving one AgentChat: (the cluster, its /metrics URL, the page once both
    tasks have succeeded)."""
    tmp = tmp_path_factory.mktemp("operator")
    cluster = KubeEmulator(tmp).start()
    port, metrics_port = free_port(), free_port()
    op = Service(
        ["operator", "--standalone", "--host", "127.0.0.1", "--port", str(port)],
        env={"KUBECONFIG": str(cluster.kubeconfig), "AGENTCHAT_OPERATOR_TUNING__TICK_S": "0.3",
             "AGENTCHAT_OPERATOR_TUNING__CONSISTENCY_TIMEOUT_S": "0",
             "AGENTCHAT_OPERATOR_METRICS_HOST": "127.0.0.1",
             "AGENTCHAT_OPERATOR_METRICS_PORT": str(metrics_port),
             "AGENTCHAT_DATA_DIR": str(tmp / "data"), "DATABASE_URL": "",
             "AGENTCHAT_MODE": "dev"},
        port=port, ready_path="/healthz", log=tmp / "operator.log")
    try:
        cluster.create_secret(NS, "chat-db", {"url": turned.database_url})
        cluster.create_agentchat(NS, "chat", {"database": {"secretRef": {"name": "chat-db"}}})
        op.start()
        url = f"http://127.0.0.1:{metrics_port}"
        deadline = time.monotonic() + 30
        page = ""
        while time.monotonic() < deadline:
            page = _page(url)
            if all(_sample(page, "agentchat_operator_last_success_timestamp_seconds", task=t)
                   for t in ("keys", "prune")):
                break
            time.sleep(0.2)
        yield cluster, url, page
    finally:
        op.stop()
        cluster.stop()


@pytest.fixture(scope="module")
def operator_page(operator_run: tuple[KubeEmulator, str, str]) -> str:
    return operator_run[2]


def test_every_dashboard_and_alert_series_is_served(turned: Stack, operator_page: str) -> None:
    pages = {"agent": _page(turned.agent.url), "policy": _page(turned.policy.url),
             "operator": operator_page}
    served = set().union(*(exposed(p) for p in pages.values()))
    missing = used_names() - served
    assert not missing, f"named in the chart, served by no component: {sorted(missing)}"


def test_the_turn_moved_its_metrics(turned: Stack) -> None:
    page = _page(turned.agent.url)
    assert (_sample(page, "agentchat_turns_total", status="awaiting_confirmation") or 0) >= 1
    assert (_sample(page, "agentchat_cards_total", outcome="shown") or 0) >= 1
    assert (_sample(page, "agentchat_agent_policy_decisions_total", outcome="confirm") or 0) >= 1
    assert (_sample(page, "agentchat_agent_policy_decisions_total", outcome="allow") or 0) >= 1
    assert (_sample(page, "agentchat_tool_calls_total", tool="get_dashboard",
                    outcome="ok") or 0) >= 1
    assert (_sample(page, "agentchat_agent_policy_seconds_count") or 0) >= 2
    policy = _page(turned.policy.url)
    assert (_sample(policy, "agentchat_policy_decisions_total",
                    decision="allow_with_confirmation") or 0) >= 1


def test_operator_counts_its_work(operator_page: str) -> None:
    page = operator_page
    who = {"agentchat": f"{NS}/chat"}
    now = time.time()
    for task in ("keys", "prune"):
        last = _sample(page, "agentchat_operator_last_success_timestamp_seconds", task=task,
                       **who)
        assert last is not None and now - 60 < last <= now + 1, (task, last)
    assert _sample(page, "agentchat_operator_rotations_total", action="created", **who) == 1
    assert _sample(page, "agentchat_operator_token_renewals_total", **who) == 1
    assert _sample(page, "agentchat_operator_prune_runs_total", result="ok", **who) == 1
    assert _sample(page, "agentchat_operator_pruned_rows_total", **who) is not None
    expiry = _sample(page, "agentchat_operator_token_expiry_timestamp_seconds", **who)
    refresh = _sample(page, "agentchat_operator_token_refresh_timestamp_seconds", **who)
    assert expiry and refresh and now < refresh < expiry
    assert (_sample(page, "agentchat_operator_keys_next_transition_timestamp_seconds", **who)
            or 0) > now


def test_no_series_carries_a_user_or_conversation_id(turned: Stack, operator_page: str) -> None:
    ids = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-|\b[0-9a-f]{32}\b")
    for page in (_page(turned.agent.url), _page(turned.policy.url), operator_page):
        for line in page.splitlines():
            if line.startswith("#") or "{" not in line:
                continue
            labels = line[line.index("{"):line.rindex("}")]
            assert not re.search(r'\b(user|sub|conversation|thread|turn)(_id)?="', labels), line
            assert not ids.search(labels), line
            assert "alice" not in labels, line



def test_a_deleted_agentchat_leaves_no_series(operator_run: tuple[KubeEmulator, str, str]
                                              ) -> None:
    """Its last timestamps would otherwise stay, and an overdue-renewal alert fire forever."""
    cluster, url, page = operator_run
    who = f'agentchat="{NS}/chat"'
    assert who in page
    cluster.delete(f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{NS}/{c.PLURAL}/chat")
    deadline = time.monotonic() + 20
    while who in (page := _page(url)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [line for line in page.splitlines() if who in line] == []
    # The metrics themselves stay declared (a new AgentChat would fill them again).
    assert "# TYPE agentchat_operator_token_refresh_timestamp_seconds gauge" in page
