"""The Conversations REST API over HTTP against the running agent and real PostgreSQL:
create, list, rename, search, pagination under concurrent inserts, soft delete and restore."""

from __future__ import annotations

import threading
from datetime import datetime

from testkit.rest import api, append, chat, create, fresh_user, listing, of_type, ok, session
from testkit.stack import Stack

BASE = "/api/assistant/conversations"


def test_create_list_rename(stack: Stack) -> None:
    token = fresh_user(stack)
    named = create(stack, token, "Отчёт по энергопотреблению")
    assert set(named) >= {"id", "title", "created_at"}
    assert named["title"] == "Отчёт по энергопотреблению" and not named["is_archived"]
    untitled = ok(api(stack, "POST", BASE, token), 201)  # no body at all
    assert untitled["title"] == ""
    page = listing(stack, token)
    assert [c["id"] for c in page["items"]] == [untitled["id"], named["id"]]  # newest first
    assert page["next_cursor"] is None

    renamed = ok(api(stack, "PATCH", f"{BASE}/{named['id']}", token,
                     json={"title": "  Energy report  "}))
    assert renamed["title"] == "Energy report"
    assert listing(stack, token)["items"][1]["title"] == "Energy report"
    resp = api(stack, "PATCH", f"{BASE}/{named['id']}", token, json={"title": "   "})
    assert resp.status_code == 422 and resp.json()["code"] == "INVALID_REQUEST"


def test_title_from_first_user_message(stack: Stack) -> None:
    token = fresh_user(stack)
    conv = create(stack, token)
    ok(append(stack, token, conv["id"], "Hello there", role="assistant"), 201)
    ok(append(stack, token, conv["id"], "Покажи здоровье окружений"), 201)
    ok(append(stack, token, conv["id"], "А теперь другое"), 201)
    assert listing(stack, token)["items"][0]["title"] == "Покажи здоровье окружений"


def test_chat_conversation_appears_with_its_title(stack: Stack) -> None:
    token = stack.token("alice")
    tab = session(stack, token)
    events = chat(tab, "покажи здоровье окружения ss-dev")
    cid = events[-1]["metadata"]["conversation_id"]
    assert events[-1]["metadata"].get("message_id"), events[-1]
    items = {c["id"]: c for c in listing(stack, token, limit=100)["items"]}
    assert items[cid]["title"] == "покажи здоровье окружения ss-dev"
    # and /chat takes a conversation created here
    created = create(stack, token, "made over REST")
    later = chat(tab, "привет", None, created["id"])
    assert later[-1]["metadata"]["conversation_id"] == created["id"]
    assert later[-1]["metadata"].get("message_id"), later[-1]


def _key(c: dict[str, str]) -> tuple[datetime, str]:
    return datetime.fromisoformat(c["last_activity_at"]), c["id"]


def test_pagination_stable_under_concurrent_inserts(stack: Stack) -> None:
    token = fresh_user(stack)
    before = [create(stack, token, f"conversation {i}")["id"] for i in range(23)]
    stop = threading.Event()
    inserted: list[str] = []

    def writer() -> None:  # keeps inserting while the client pages
        while not stop.is_set():
            inserted.append(create(stack, token, "inserted meanwhile")["id"])

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[dict[str, str]] = []
    try:
        cursor = None
        while True:
            params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
            page = listing(stack, token, **params)
            seen.extend(page["items"])
            # a write lands between every two pages
            create(stack, token, "between pages")
            cursor = page["next_cursor"]
            if cursor is None:
                break
    finally:
        stop.set()
        thread.join()
    ids = [c["id"] for c in seen]
    assert len(ids) == len(set(ids)), "no conversation twice"
    assert set(before) <= set(ids), "every conversation that existed is listed: no gaps"
    keys = [_key(c) for c in seen]
    assert keys == sorted(keys, reverse=True), "newest activity first across pages"
    assert len(inserted) > 0


def test_cursor_errors(stack: Stack) -> None:
    token = fresh_user(stack)
    for bad in ["abc", "eyJ4Ijp9", "WyJoIiwxXQ"]:  # garbage, bad JSON, a history cursor
        resp = api(stack, "GET", BASE, token, params={"cursor": bad})
        assert resp.status_code == 400, resp.text
        assert resp.json() == {"code": "INVALID_REQUEST",
                               "detail": "the cursor is not one this list issued"}
    for params in ({"limit": 0}, {"limit": 101}, {"q": "x" * 201}):
        resp = api(stack, "GET", BASE, token, params=params)
        assert resp.status_code == 422 and resp.json()["code"] == "INVALID_REQUEST"


def test_search_russian_and_english_with_stemming(stack: Stack) -> None:
    token = fresh_user(stack)
    energy = create(stack, token, "Отчёт по энергопотреблению")
    deploy = create(stack, token)
    ok(append(stack, token, deploy["id"], "Deploying the sales dashboards to prod"), 201)
    health = create(stack, token, "misc")
    ok(append(stack, token, health["id"], "Проверь здоровье окружений", role="assistant"), 201)
    migrate = create(stack, token, "Migrations between environments")

    def found(q: str, **kw: object) -> list[str]:
        return [c["id"] for c in listing(stack, token, q=q, **kw)["items"]]

    assert found("энергопотребление") == [energy["id"]]        # title, another case
    assert found("отчеты") == [energy["id"]]                    # plural, е for ё
    assert found("deploy dashboard") == [deploy["id"]]          # message text, English stems
    assert found("dashboards deployed") == [deploy["id"]]
    assert found("здоровья") == [health["id"]]                  # an assistant message, Russian
    assert found("migrating") == [migrate["id"]]
    assert found("окружение") == [health["id"]]
    assert found("environment") == [migrate["id"]]
    assert found("nothing like this") == []
    # another user's matching conversation never shows; archived only when asked
    other = fresh_user(stack)
    create(stack, other, "Отчёт по энергопотреблению")
    ok(api(stack, "DELETE", f"{BASE}/{energy['id']}", token))
    assert found("энергопотребление") == []
    assert found("энергопотребление", include_archived="true") == [energy["id"]]


def test_search_is_scoped_to_the_caller_and_keeps_websearch_syntax(stack: Stack) -> None:
    """Message text is matched on each conversation's words (migration 5): words anywhere in
    the conversation, a quoted phrase as its words, OR and negation as websearch has them, and
    the same words in another user's conversations never match."""
    token, other = fresh_user(stack), fresh_user(stack)
    mine = create(stack, token, "misc")
    ok(append(stack, token, mine["id"], "Dashboard O'Brien's sales report is ready"), 201)
    plain = create(stack, token, "misc")
    ok(append(stack, token, plain["id"], "the report for sales"), 201)
    ok(append(stack, token, plain["id"], "it is ready now", role="assistant"), 201)
    theirs = create(stack, other, "misc")
    ok(append(stack, other, theirs["id"], "Инцидент: dashboard O'Brien's sales report"), 201)

    def found(user: str, q: str) -> list[str]:
        return [c["id"] for c in listing(stack, user, q=q)["items"]]

    assert found(token, "инцидент") == []                       # only the other user has it
    assert found(other, "инцидент") == [theirs["id"]]
    assert found(token, "O'Brien's") == [mine["id"]]            # a quote inside a lexeme
    assert found(token, "report ready") == [plain["id"], mine["id"]]  # across messages too
    assert found(token, '"sales report"') == [plain["id"], mine["id"]]  # a phrase's words
    assert found(token, "report -dashboard") == [plain["id"]]   # negation
    assert found(token, "dashboard or nothing") == [mine["id"]]


def test_search_pages_with_a_cursor(stack: Stack) -> None:
    token = fresh_user(stack)
    ids = [create(stack, token, f"Dashboard report {i}")["id"] for i in range(5)]
    create(stack, token, "unrelated")
    first = listing(stack, token, q="reports", limit=3)
    second = listing(stack, token, q="reports", limit=3, cursor=first["next_cursor"])
    assert second["next_cursor"] is None
    got = [c["id"] for c in first["items"] + second["items"]]
    assert got == list(reversed(ids))


def test_soft_delete_refuses_turns_and_restore_undoes_it(stack: Stack) -> None:
    token = stack.token("alice")
    tab = session(stack, token)
    first = chat(tab, "привет")
    cid = first[-1]["metadata"]["conversation_id"]
    archived = ok(api(stack, "DELETE", f"{BASE}/{cid}", token))
    assert archived["is_archived"] and archived["archived_at"]
    again = ok(api(stack, "DELETE", f"{BASE}/{cid}", token))  # idempotent
    assert again["archived_at"] == archived["archived_at"]
    assert cid not in [c["id"] for c in listing(stack, token, limit=100)["items"]]
    assert cid in [c["id"] for c in listing(stack, token, limit=100,
                                             include_archived="true")["items"]]

    refused = chat(tab, "ещё вопрос", None, cid)
    assert refused[-1]["metadata"]["type"] == "error"
    assert refused[-1]["metadata"]["code"] == "CONVERSATION_ARCHIVED"
    resp = append(stack, token, cid, "posted to an archived conversation")
    assert resp.status_code == 409 and resp.json()["code"] == "CONVERSATION_ARCHIVED"
    # the history is still readable, and nothing was added by the refused turn
    texts = [m["content"] for m in ok(api(stack, "GET", "/api/assistant/history", token,
                                          params={"conversation_id": cid}))["items"]]
    assert "ещё вопрос" not in texts

    restored = ok(api(stack, "POST", f"{BASE}/{cid}/restore", token))
    assert not restored["is_archived"] and restored["archived_at"] is None
    assert cid in [c["id"] for c in listing(stack, token, limit=100)["items"]]
    after = chat(tab, "ещё вопрос", None, cid)
    assert after[-1]["metadata"].get("message_id"), after[-1]
    assert not of_type(after, "error")
