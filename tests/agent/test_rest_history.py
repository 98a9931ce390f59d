"""History over HTTP: turns streamed through /chat read back with their tool and confirmation
cards, paging, the idempotent append (client id and the final event's message_id), and every
endpoint refusing another user's, a forged and a missing token."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentchat.identity import DevUserIssuer
from agentchat.keys import ensure_ring
from testkit.attacks import user_attacks
from testkit.rest import api, append, chat, create, fresh_user, history, of_type, ok, session
from testkit.stack import Stack


def _cards(items: list[dict[str, Any]], key: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """call_id or confirm_id -> (the message it hangs on, the card)."""
    ident = "call_id" if key == "tool_calls" else "confirm_id"
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for m in items:
        for card in m[key]:
            assert card[ident] not in found, "each card on one message only"
            found[card[ident]] = (m["id"], card)
    return found


def test_turn_with_tool_and_confirmation_read_back_with_its_cards(stack: Stack) -> None:
    token = stack.token("alice")
    tab = session(stack, token)
    read = chat(tab, "покажи здоровье окружения ss-dev")
    cid = read[-1]["metadata"]["conversation_id"]
    asked = chat(tab, "задеплой дашборд 42 в ss-stage", None, cid)
    card = of_type(asked, "confirm_required")[0]["metadata"]

    # after a reload while the card waits: the card is there, pending, with its payload
    pending = _cards(history(stack, token, cid)["items"], "confirmations")
    assert pending[card["confirm_id"]][1]["status"] == "pending"
    assert pending[card["confirm_id"]][1]["card"]["tool_args"] == card["tool_args"]

    done = chat(tab, {"text": "__resume__", "files": []}, "confirm", cid)
    final = done[-1]
    assert final["metadata"].get("message_id"), final
    starts = of_type(read + asked + done, "tool_start")
    ends = {e["metadata"]["call_id"]: e for e in of_type(read + asked + done, "tool_end")}
    assert any(s["metadata"]["tool"] == "deploy_dashboard" for s in starts)

    page = history(stack, token, cid)
    items = page["items"]
    assert page["next_cursor"] is None
    assert [m["role"] for m in items][:2] == ["user", "assistant"]
    assert items[0]["content"] == "покажи здоровье окружения ss-dev"
    assert items[-1]["id"] == final["metadata"]["message_id"]
    assert items[-1]["content"] == final["content"]
    assert all(not m["partial"] for m in items)

    calls = _cards(items, "tool_calls")
    assert set(calls) == {s["metadata"]["call_id"] for s in starts}
    for start in starts:
        where, call = calls[start["metadata"]["call_id"]]
        assert call["tool"] == start["metadata"]["tool"]
        assert call["input"] == start["metadata"]["input"]
        assert call["outcome"] == "ok"
        assert call["output"] == ends[call["call_id"]]["metadata"]["output"]
        assert next(m for m in items if m["id"] == where)["role"] == "assistant"
    deploy = next(c for _, c in calls.values() if c["tool"] == "deploy_dashboard")
    assert deploy["input"] == {"dashboard_id": 42, "env_id": "ss-stage"}
    # the confirmed call and its card are on the answer the resumed stream ended with
    assert calls[deploy["call_id"]][0] == final["metadata"]["message_id"]
    where, resolved = _cards(items, "confirmations")[card["confirm_id"]]
    assert where == final["metadata"]["message_id"]
    assert resolved["status"] == "confirmed" and resolved["resolved_at"]
    assert resolved["tool_name"] == "deploy_dashboard"
    assert resolved["call_id"] == deploy["call_id"]
    assert resolved["card"]["confirm_id"] == card["confirm_id"]


def test_denied_card_and_a_new_message_over_a_pending_card(stack: Stack) -> None:
    token = stack.token("alice")
    tab = session(stack, token)
    first = chat(tab, "задеплой дашборд 43 в прод")
    cid = first[-1]["metadata"]["conversation_id"]
    c1 = of_type(first, "confirm_required")[0]["metadata"]["confirm_id"]
    chat(tab, "__resume__", "deny", cid)
    second = chat(tab, "задеплой дашборд 44 в прод", None, cid)
    c2 = of_type(second, "confirm_required")[0]["metadata"]["confirm_id"]
    chat(tab, "привет", None, cid)  # resolves the pending card as denied first
    cards = _cards(history(stack, token, cid)["items"], "confirmations")
    assert cards[c1][1]["status"] == "denied"
    assert cards[c2][1]["status"] == "denied"
    calls = _cards(history(stack, token, cid)["items"], "tool_calls")
    assert all(c["tool"] != "deploy_dashboard" for _, c in calls.values()), "nothing ran"


def test_history_pages_newest_first(stack: Stack) -> None:
    token = fresh_user(stack)
    cid = create(stack, token)["id"]
    for i in range(7):
        ok(append(stack, token, cid, f"message {i}", role="user" if i % 2 == 0 else "assistant"),
           201)
    pages, cursor = [], None
    while True:
        page = history(stack, token, cid, limit=3, **({"cursor": cursor} if cursor else {}))
        pages.append([m["content"] for m in page["items"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [["message 4", "message 5", "message 6"],
                     ["message 1", "message 2", "message 3"], ["message 0"]]
    resp = api(stack, "GET", "/api/assistant/history", token,
               params={"conversation_id": cid, "cursor": "WyJjIiwieCJd"})  # a list cursor
    assert resp.status_code == 400 and resp.json()["code"] == "INVALID_REQUEST"


def test_append_is_idempotent_on_both_ids(stack: Stack) -> None:
    token = stack.token("alice")
    tab = session(stack, token)
    events = chat(tab, "привет")
    final = events[-1]
    cid, message_id = final["metadata"]["conversation_id"], final["metadata"]["message_id"]
    count = len(history(stack, token, cid)["items"])

    # the frontend posts the answer the stream ended with: nothing new is stored
    resp = append(stack, token, cid, final["content"], role="assistant", message_id=message_id)
    assert resp.status_code == 200, resp.text
    assert resp.json()["id"] == message_id and resp.json()["content"] == final["content"]
    assert resp.json()["turn_id"], "it is the turn's own record"

    client_id = str(uuid.uuid4())
    created = append(stack, token, cid, "client message", message_id=client_id)
    assert created.status_code == 201, created.text
    replay = append(stack, token, cid, "client message", message_id=client_id)
    assert replay.status_code == 200 and replay.json() == created.json()
    items = history(stack, token, cid)["items"]
    assert len(items) == count + 1
    assert [m["id"] for m in items].count(client_id) == 1

    # an id stored in another conversation is refused, revealing nothing about it
    other = create(stack, token)["id"]
    taken = append(stack, token, other, "x", message_id=client_id)
    assert taken.status_code == 400 and taken.json()["code"] == "INVALID_REQUEST"
    for body in ({"id": "", "role": "user", "content": "x"},
                 {"id": "a", "role": "system", "content": "x"},
                 {"id": "a", "role": "user", "content": "nul \u0000 byte"}):
        resp = api(stack, "POST", f"/api/assistant/conversations/{other}/messages", token,
                   json=body)
        assert resp.status_code == 422 and resp.json()["code"] == "INVALID_REQUEST", resp.text


def _endpoints(cid: str) -> list[tuple[str, str, dict[str, Any]]]:
    base = f"/api/assistant/conversations/{cid}"
    return [
        ("GET", "/api/assistant/history", {"params": {"conversation_id": cid}}),
        ("PATCH", base, {"json": {"title": "mine now"}}),
        ("DELETE", base, {}),
        ("POST", base + "/restore", {}),
        ("POST", base + "/messages", {"json": {"id": str(uuid.uuid4()), "role": "user",
                                               "content": "hi"}}),
    ]


def test_another_users_conversation_is_not_found_like_a_missing_one(stack: Stack) -> None:
    alice = stack.token("alice")
    cid = create(stack, alice, "alice's")["id"]
    ok(append(stack, alice, cid, "secret"), 201)
    bob = stack.token("bob")
    for method, path, kw in _endpoints(cid):
        theirs = api(stack, method, path, bob, **kw)
        missing = api(stack, method, path.replace(cid, str(uuid.uuid4())), bob, **{
            k: ({"conversation_id": str(uuid.uuid4())} if k == "params" else v)
            for k, v in kw.items()})
        assert theirs.status_code == missing.status_code == 404, (method, path, theirs.text)
        assert theirs.json() == missing.json() == {"code": "NOT_FOUND",
                                                   "detail": "no such conversation"}
    assert cid not in [c["id"] for c in ok(api(stack, "GET", "/api/assistant/conversations",
                                               bob, params={"q": "alice's"}))["items"]]
    # and alice's conversation is untouched
    page = ok(api(stack, "GET", "/api/assistant/conversations", alice, params={"limit": 100}))
    mine = next(c for c in page["items"] if c["id"] == cid)
    assert mine["title"] == "alice's" and not mine["is_archived"]
    assert [m["content"] for m in history(stack, alice, cid)["items"]] == ["secret"]


@pytest.mark.parametrize("kind", ["forged", "none"])
def test_every_endpoint_refuses_a_forged_or_missing_token(stack: Stack, kind: str) -> None:
    cid = create(stack, stack.token("alice"))["id"]
    settings = stack.settings()
    attacks = user_attacks(settings, DevUserIssuer(settings),
                           ensure_ring(settings.keys_dir, settings.jwks_path))
    tokens: list[str | None] = list(attacks.values()) if kind == "forged" else [None]
    calls = [*_endpoints(cid), ("GET", "/api/assistant/conversations", {}),
             ("POST", "/api/assistant/conversations", {"json": {"title": "x"}})]
    for token in tokens:
        for method, path, kw in calls:
            resp = api(stack, method, path, token, **kw)
            assert resp.status_code == 401, (method, path, resp.text)
            assert resp.json()["code"] == "UNAUTHORIZED"
    # nothing was changed by any of them
    assert [m["content"] for m in history(stack, stack.token("alice"), cid)["items"]] == []
