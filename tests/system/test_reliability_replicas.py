"""Two agent replicas (a sidecar each) on one database, as two pods behind the ingress: a
conversation started on one is listed, continued and confirmed on the other; the multi-tab
lease holds across them; a card raised on A is answered through B after A is stopped
(issue 5), and the confirmed call runs exactly once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import (
    assert_consistent,
    audit_ok,
    history_items,
    rows,
    say,
    start_replica,
    wait_for,
    when_free,
)
from testkit.stack import Stack, running_stack
from testkit.support import Service, create_database, drop_database

# A short lease so a card outlives it within the test; answers paced like a slow model so a
# turn is still streaming when the other replica is asked.
ENV = {"AGENTCHAT_AGENT_TUNING__LEASE_S": "2",
       "AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.02"}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
             migrated_template: str) -> Iterator[tuple[Stack, Service, Service]]:
    url = create_database(pg_server, template=migrated_template)
    try:
        with running_stack(tmp_path_factory.mktemp("replicas"), url, **ENV) as s:
            b, _ = start_replica(s)
            yield s, s.agent, b
    finally:
        drop_database(pg_server, url)


def test_started_on_one_listed_continued_and_confirmed_on_the_other(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, b = replicas
    alice = stack.token("alice")
    first = say(a, alice, "задеплой дашборд 42 в ss-stage")
    assert first.kind == "confirm_required", first.types()
    cid = first.conversation_id
    card = first.last
    listed = wait_for(lambda: [c for c in httpx.get(
        b.url + "/api/assistant/conversations", timeout=10,
        headers={"Authorization": f"Bearer {alice}"}).json()["items"] if c["id"] == cid],
        "the conversation listed on B")
    assert listed[0]["title"]
    # The card outlives A's lease: once it lapses, B answers it (naming the card).
    resume = {"text": "__resume__", "files": [], "confirm_id": card["confirm_id"]}
    answer = when_free(lambda: say(b, alice, resume, "confirm", cid))
    assert answer.kind == "final", answer.types()
    assert answer.of("confirm_resolved")[0]["result"] == "confirmed"
    assert answer.kind == "final", answer.types()
    done = wait_for(lambda: audit_ok(stack, operation="deploy_dashboard",
                                     idempotency_key=card["confirm_id"]),
                    "the confirmed deploy in the audit")
    assert len(done) == 1
    # Continued on B, then on A again (each after the other's lease lapsed).
    nxt = when_free(lambda: say(b, alice, "покажи окна обслуживания", None, cid))
    assert nxt.kind == "final", nxt.types()
    assert nxt.conversation_id == cid
    back = when_free(lambda: say(a, alice, "привет", None, cid))
    assert back.kind == "final", back.types()
    assert back.last["message_id"]
    assert len(audit_ok(stack, operation="deploy_dashboard",
                        idempotency_key=card["confirm_id"])) == 1
    assert_consistent(stack.database_url, cid)
    roles = [m["role"] for m in history_items(b, alice, cid)]
    assert roles.count("user") == 3


def test_the_lease_holds_across_replicas(replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, b = replicas
    alice = stack.token("alice")
    tab = RawChat(a.url, alice, None)  # type: ignore[arg-type]  # one tab on A
    first = say(a, alice, "привет", tab=tab)
    cid = first.conversation_id
    assert first.kind == "final"
    seen: dict[str, Outcome] = {}

    def long_turn() -> None:
        seen["a"] = say(a, alice, "привет and echo 300 words", None, cid, tab=tab)

    # A's tab: a long answer streaming; a tab on B asks meanwhile and is refused.
    t = threading.Thread(target=long_turn)
    t.start()
    try:
        wait_for(lambda: stack_rows_running(stack, cid), "A's turn running")
        busy = say(b, alice, "привет", None, cid)
        assert busy.kind == "error" and busy.last["code"] == "CONVERSATION_BUSY", busy.types()
        assert busy.last["retryable"] is True
    finally:
        t.join(120)
    assert seen["a"].kind == "final", seen["a"].last
    assert_consistent(stack.database_url, cid)


def stack_rows_running(stack: Stack, cid: str) -> bool:
    return bool(rows(stack.database_url, "SELECT 1 FROM turns WHERE conversation_id=%s"
                     " AND status='running'", cid))


def test_card_raised_on_a_confirmed_through_b_after_a_stopped(
        replicas: tuple[Stack, Service, Service]) -> None:
    """Issue 5: resume from a second agent process after the first is stopped."""
    stack, _, b = replicas
    alice = stack.token("alice")
    c, _ = start_replica(stack, **ENV)
    first = say(c, alice, "задеплой дашборд 43 в прод")
    assert first.kind == "confirm_required", first.types()
    cid, card = first.conversation_id, first.last
    c.stop()
    answer = when_free(lambda: say(b, alice, "__resume__", "confirm", cid))
    assert answer.kind == "final", answer.types()
    assert answer.types()[0] == "confirm_resolved"
    assert answer.of("confirm_resolved")[0]["result"] == "confirmed"
    assert answer.kind == "final", answer.types()
    ends = answer.of("tool_end")
    assert [e["tool"] for e in ends] == ["deploy_dashboard"]
    runs = audit_ok(stack, operation="deploy_dashboard", idempotency_key=card["confirm_id"])
    assert len(runs) == 1 and runs[0]["env"] == "prod"
    assert_consistent(stack.database_url, cid)
