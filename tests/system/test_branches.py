"""Edit and regenerate as branches (issue 35), from outside: `/chat` over Gradio's HTTP queue,
the REST history and branch switch, the sandbox's audit. One stack for the module (the agent
on the stub model, which answers with the offline planner and records what it was sent).

- Edit the second of three messages: the active branch is the new one, the message has two
  siblings, switching back shows the old answers and the next message continues the old
  branch (the model is sent that branch); both branches survive a restart.
- Regenerate the last answer twice: three siblings.
- A fork after a confirmed prod deploy does not run it again; its first event lists it, the
  model's context states it; proposed again it gets a new card, a new idempotency key and one
  new execution; the audit names each call's branch.
- Edit while a card is pending or a run is live, a bad message id: refused, nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import audit_ok, history_items, say, wait_for
from testkit.rest import api, ok
from testkit.stack import Stack, running_stack
from testkit.support import Service, create_database, drop_database, stub_model_env


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str, migrated_template: str,
          model: Service) -> Iterator[Stack]:
    url = create_database(pg_server, template=migrated_template)
    try:
        with running_stack(tmp_path_factory.mktemp("branches"), url,
                           **stub_model_env(model)) as s:
            yield s
    finally:
        drop_database(pg_server, url)


def fork(action: str, cid: str, message_id: str | None = None, text: str = "") -> dict[str, Any]:
    return {"text": text, "files": [], "action": action, "conversation_id": cid,
            "message_id": message_id}


def turn(stack: Stack, token: str, tab: RawChat, message: Any, *rest: Any) -> Outcome:
    out = say(stack.agent, token, message, *rest, tab=tab, timeout=60)
    assert out.kind in ("final", "confirm_required", "error"), out.types()
    return out


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in items]


def switch(stack: Stack, token: str, cid: str, message_id: str, tab: RawChat) -> Any:
    return api(stack, "POST", f"/api/assistant/conversations/{cid}/branch", token,
               json={"message_id": message_id, "tab_id": tab.session})


def received(model: Service) -> list[dict[str, Any]]:
    return list(httpx.get(model.url + "/received", timeout=5).json()["received"])


def test_edit_switch_back_continue_and_restart(stack: Stack, model: Service) -> None:
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    cid = turn(stack, alice, tab, "привет and echo 3 words").conversation_id
    assert cid is not None
    turn(stack, alice, tab, "привет and echo 5 words", None, cid)
    turn(stack, alice, tab, "привет and echo 7 words", None, cid)
    old = history_items(stack.agent, alice, cid)
    assert [m["role"] for m in old] == ["user", "assistant"] * 3
    assert all(m["siblings"] is None for m in old)
    assert [m["parent_id"] for m in old] == [None, *ids(old)[:-1]]

    edited = turn(stack, alice, tab, fork("edit", cid, old[2]["id"], "привет and echo 9 words"))
    assert edited.kind == "final", edited.types()
    first = edited.events[0]["metadata"]
    assert first["type"] == "forked" and first["seq"] == 1
    assert first["forked_from"] == {"message_id": old[2]["id"], "executed": []}
    new = history_items(stack.agent, alice, cid)
    assert ids(new)[:2] == ids(old)[:2] and len(new) == 4
    assert new[2]["id"] == first["message_id"] and new[2]["content"] == "привет and echo 9 words"
    assert new[2]["parent_id"] == old[1]["id"]
    assert new[2]["siblings"] == {"index": 1, "count": 2, "ids": [old[2]["id"], new[2]["id"]]}
    assert "w8" in new[3]["content"]

    # Back to the old branch: its answers again; the next message continues it, and the model
    # is sent that branch, not the edit.
    assert ok(switch(stack, alice, cid, old[2]["id"], tab))["leaf_id"] == old[-1]["id"]
    back = history_items(stack.agent, alice, cid)
    assert ids(back) == ids(old)
    assert back[2]["siblings"]["index"] == 0
    httpx.delete(model.url + "/received", timeout=5)
    turn(stack, alice, tab, "привет and echo 2 words", None, cid)
    sent = received(model)[-1]["user"]
    assert "привет and echo 5 words" in sent and "привет and echo 9 words" not in sent
    longer = history_items(stack.agent, alice, cid)
    assert ids(longer)[:6] == ids(old) and len(longer) == 8

    stack.agent.stop()
    stack.agent.start(timeout=90)
    assert ids(history_items(stack.agent, alice, cid)) == ids(longer)
    ok(switch(stack, alice, cid, new[2]["id"], tab))
    assert ids(history_items(stack.agent, alice, cid)) == ids(new)


def test_regenerate_twice_gives_three_siblings(stack: Stack) -> None:
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    cid = turn(stack, alice, tab, "привет and echo 4 words").conversation_id
    assert cid is not None
    for _ in range(2):
        out = turn(stack, alice, tab, fork("regenerate", cid))
        assert out.kind == "final" and out.events[0]["metadata"]["type"] == "forked"
    items = history_items(stack.agent, alice, cid)
    assert [m["role"] for m in items] == ["user", "assistant"]
    assert items[0]["content"] == "привет and echo 4 words"
    assert items[0]["siblings"]["count"] == 3 and items[0]["siblings"]["index"] == 2


def test_a_fork_never_replays_a_confirmed_deploy(stack: Stack, model: Service) -> None:
    stack.reset_sandbox()
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    card = turn(stack, alice, tab, "задеплой дашборд 42 в прод")
    assert card.kind == "confirm_required", card.types()
    cid, key1 = card.conversation_id, card.last["confirm_id"]
    assert cid is not None
    assert turn(stack, alice, tab, "__resume__", "confirm", cid).kind == "final"
    assert len(audit_ok(stack, operation="deploy_dashboard")) == 1

    httpx.delete(model.url + "/received", timeout=5)
    again = turn(stack, alice, tab, fork("regenerate", cid))
    first = again.events[0]["metadata"]
    executed = first["forked_from"]["executed"]
    assert [(e["tool_name"], e["environment"]) for e in executed] == [
        ("deploy_dashboard", "prod")] and executed[0]["title"]
    assert any("forked_from" in s and "deploy_dashboard" in s
               for r in received(model) for s in r["system"]), "the model is told"
    assert again.kind == "confirm_required", again.types()
    key2 = again.last["confirm_id"]
    assert key2 != key1
    assert len(audit_ok(stack, operation="deploy_dashboard")) == 1, "not run again"
    assert turn(stack, alice, tab, "__resume__", "confirm", cid).kind == "final"
    runs = audit_ok(stack, operation="deploy_dashboard")
    assert sorted(str(a["idempotency_key"]) for a in runs) == sorted([key1, key2])

    records = ok(api(stack, "GET", "/api/agent/audit", alice,
                     params={"conversation_id": cid}))["items"]
    user_ids = [m["id"] for m in history_items(stack.agent, alice, cid) if m["role"] == "user"]
    siblings = history_items(stack.agent, alice, cid)[0]["siblings"]["ids"]
    assert user_ids == [first["message_id"]]
    assert sorted(r["branch"] for r in records) == sorted(siblings)


def test_refused_while_a_card_waits_or_a_run_is_live(stack: Stack) -> None:
    stack.reset_sandbox()
    alice, bob = stack.token("alice"), stack.token("bob")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    card = turn(stack, alice, tab, "deploy dashboard 42 to prod")
    cid = card.conversation_id
    assert card.kind == "confirm_required" and cid is not None
    before = history_items(stack.agent, alice, cid)
    user = before[0]["id"]

    # In the conversation's language (English here), the detail says why.
    for message in (fork("edit", cid, user, "hello"), fork("regenerate", cid)):
        out = turn(stack, alice, tab, message)
        assert out.last["code"] == "CONVERSATION_BUSY" and "card" in out.last["detail"]
    resp = switch(stack, alice, cid, user, tab)
    assert resp.status_code == 409 and resp.json()["code"] == "CONVERSATION_BUSY"
    # Bad input: another role's id, an unknown id, no text; another user's conversation.
    for message in (fork("edit", cid, before[-1]["id"], "x"), fork("edit", cid, "nope", "x"),
                    fork("edit", cid, user)):
        assert turn(stack, alice, tab, message).last["code"] == "INVALID_REQUEST"
    assert turn(stack, bob, RawChat(stack.agent.url, bob, None),  # type: ignore[arg-type]
                fork("edit", cid, user, "x")).last["code"] == "NOT_FOUND"
    assert switch(stack, bob, cid, user, tab).status_code == 404
    assert history_items(stack.agent, alice, cid) == before
    assert turn(stack, alice, tab, "__resume__", "deny", cid).kind == "final"

    # A live run (a slow search): an edit from its tab waits for it briefly, then is refused.
    stack.fault(operation="search_dashboards", delay_s=4)
    try:
        started = say(stack.agent, alice, "найди дашборды про продажи в ss-dev", None, cid,
                      tab=tab, drop_after=1)
        assert started.events, started.types()
        live = history_items(stack.agent, alice, cid)
        out = turn(stack, alice, tab, fork("edit", cid, user, "привет"))
        assert out.last["code"] == "CONVERSATION_BUSY", out.types()
        assert history_items(stack.agent, alice, cid) == live
    finally:
        stack.reset_sandbox()
    wait_for(lambda: (history_items(stack.agent, alice, cid)[-1]["role"] == "assistant"
                      and len(history_items(stack.agent, alice, cid)) > len(live)) or None,
             "the search answered", timeout=30)
