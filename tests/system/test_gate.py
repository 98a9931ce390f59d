"""The gate checks exactly what runs: a hostile model through `/chat` against the real sandbox.

The model is an OpenAI-compatible server over HTTP (`tests/testkit/openai_stub.py`, as
`ChatOpenAI` sees it) scripted to emit smuggled arguments, wrong types, extra keys, missing
environments, duplicate and missing call ids and tools it was not offered. For each, the
sandbox's audit shows no operation but the called tool's own (usually none), and the stream
shows the refusal (`tool_error` with `reason: invalid_arguments`) or a card, then the model's
answer. At its end, on the same processes: edit and regenerate as branches (issue 35), each fork
gated afresh and never replaying an approved write.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import assert_consistent, audit_ok, history_items, say, wait_for
from testkit.rest import ok
from testkit.stack import Stack
from testkit.support import Service, stub_model_env
from testkit.support import script_model as script


@pytest.fixture(scope="module")
def agent(stack: Stack, model: Service) -> Iterator[Service]:
    svc = stack.start_agent(**stub_model_env(model))
    yield svc
    svc.stop()


def seen(model: Service) -> list[dict[str, Any]]:
    return list(httpx.get(model.url + "/seen", timeout=5).json()["seen"])


def turn(agent: Service, token: str, text: str, tab: RawChat | None = None,
         cid: str | None = None, action: str | None = None) -> Outcome:
    out = say(agent, token, text, action, cid, tab=tab, timeout=60)
    assert out.kind in ("final", "confirm_required", "error"), out.types()
    return out


def operations(stack: Stack) -> list[str]:
    return [str(a["operation"]) for a in stack.audit()]


# Each: the message (so the called tool is among those offered; no dashboard number, so no
# prefetch runs before the scripted model), the smuggled call.
SMUGGLED = {
    "traversal into a deploy": (
        "обнови датасет 5 в ss-stage",
        {"name": "refresh_dataset", "args": {"dataset_id": "../dashboards/5/deploy#",
                                             "env_id": "ss-stage"}}),
    "traversal into maintenance": (
        "обнови датасет 5 в проде",
        {"name": "refresh_dataset", "args": {"dataset_id": "../maintenance?",
                                             "env_id": "prod"}}),
    "a task id reading the audit": (
        "статус задачи task-1",
        {"name": "get_task_status", "args": {"task_id": "../audit"}}),
    "an encoded slash": (
        "статус задачи task-1",
        {"name": "get_task_status", "args": {"task_id": "task-%2F..%2Faudit"}}),
    "a backslash": (
        "статус задачи task-1",
        {"name": "get_task_status", "args": {"task_id": "task-1\\..\\audit"}}),
    "a query string": (
        "статус задачи task-1",
        {"name": "get_task_status", "args": {"task_id": "task-1?all=1"}}),
    "a fragment": (
        "статус задачи task-1",
        {"name": "get_task_status", "args": {"task_id": "task-1#x"}}),
    "a string for an integer": (
        "задеплой дашборд в ss-dev",
        {"name": "deploy_dashboard", "args": {"dashboard_id": "42", "env_id": "ss-dev"}}),
    "an extra key": (
        "найди дашборды про продажи в ss-dev",
        {"name": "search_dashboards", "args": {"query": "x", "env_id": "ss-dev",
                                               "path": "/api/audit"}}),
    "a missing environment": (
        "удали дашборд",
        {"name": "delete_dashboard", "args": {"dashboard_id": 5}}),
    "an unknown environment": (
        "задеплой дашборд в qa",
        {"name": "deploy_dashboard", "args": {"dashboard_id": 42, "env_id": "qa"}}),
    "arguments that are not JSON": (
        "задеплой дашборд в ss-dev",
        {"name": "deploy_dashboard", "raw_args": "{\"dashboard_id\": 42, "}),
    "a tool not offered": (
        "что ты умеешь?",
        {"name": "delete_dashboard", "args": {"dashboard_id": 5, "env_id": "ss-dev"}}),
}


@pytest.mark.parametrize("attack", list(SMUGGLED))
def test_smuggled_calls_are_refused_and_nothing_is_sent(stack: Stack, agent: Service,
                                                        model: Service, attack: str) -> None:
    text, call = SMUGGLED[attack]
    stack.reset_sandbox()
    script(model, [{**call, "id": "call_0"}])
    out = turn(agent, stack.token("alice"), text)
    assert out.kind == "final", out.types()
    errors = out.of("tool_error")
    assert len(errors) == 1, out.types()
    err = errors[0]
    assert (err["tool"], err["code"], err["reason"], err["retryable"]) == (
        call["name"], "TOOL_FAILURE", "invalid_arguments", False)
    assert err["error"].startswith("not run:")
    assert "tool_end" not in out.types() and "confirm_required" not in out.types()
    # The model got the refusal and answered; nothing reached the ss-tools API.
    assert out.events[-1]["content"].startswith("ANSWER: not run:")
    assert operations(stack) == [], "nothing was sent"
    assert out.conversation_id
    assert_consistent(stack.database_url, out.conversation_id)


def test_admin_scoped_to_one_environment_cannot_delete_without_one(
        stack: Stack, agent: Service, model: Service) -> None:
    """`admin@ss-dev` + delete without env_id was `allow_with_confirmation` (any environment)."""
    stack.reset_sandbox()
    script(model, [{"name": "delete_dashboard", "args": {"dashboard_id": 5}, "id": "x"}])
    out = turn(agent, stack.token("dave", ["admin@ss-dev"]), "удали дашборд")
    assert [e["reason"] for e in out.of("tool_error")] == ["invalid_arguments"]
    assert "confirm_required" not in out.types()
    assert operations(stack) == []


@pytest.mark.parametrize("ids", [["call_0", "call_0"], [None, None]], ids=["repeated", "none"])
def test_one_decision_never_covers_another_call(stack: Stack, agent: Service, model: Service,
                                                ids: list[str | None]) -> None:
    """A read's `allow` must not carry a prod delete that shares (or lacks) its id."""
    stack.reset_sandbox()
    script(model, [
        {"name": "search_dashboards", "args": {"query": "продажи", "env_id": "prod"},
         "id": ids[0]},
        {"name": "delete_dashboard", "args": {"dashboard_id": 5, "env_id": "prod"},
         "id": ids[1]}])
    tab = RawChat(agent.url, stack.token("alice"), None)  # type: ignore[arg-type]
    out = turn(agent, stack.token("alice"), "найди дашборды про продажи и удали дашборд в проде",
               tab=tab)
    assert out.kind == "confirm_required", out.types()
    card = out.last
    assert (card["tool_name"], card["tool_args"]) == (
        "delete_dashboard", {"dashboard_id": 5, "env_id": "prod"})
    assert operations(stack) == [], "nothing runs before the last card is answered"
    cid = out.conversation_id
    denied = turn(agent, stack.token("alice"), "__resume__", tab=tab, cid=cid, action="deny")
    assert denied.kind == "final", denied.types()
    starts = denied.of("tool_start")
    assert [s["tool"] for s in starts] == ["search_dashboards"]
    assert starts[0]["call_id"] != card["call_id"]
    assert operations(stack) == ["search_dashboards"], "the delete never ran"
    assert cid
    assert_consistent(stack.database_url, cid)


def test_identical_writes_in_two_turns_run_twice(stack: Stack, agent: Service,
                                                 model: Service) -> None:
    """The model's raw `call_0` was the Idempotency-Key: the second deploy was a replay. (The
    first deploy's result is ss-tools text in the thread, so the second asks for a card:
    agent/graph/taint.py.)"""
    stack.reset_sandbox()
    call = {"name": "deploy_dashboard", "args": {"dashboard_id": 42, "env_id": "ss-dev"},
            "id": "call_0"}
    token = stack.token("alice")
    tab = RawChat(agent.url, token, None)  # type: ignore[arg-type]
    script(model, [call])
    first = turn(agent, token, "задеплой дашборд в ss-dev", tab=tab)
    assert first.kind == "final" and first.of("tool_end"), first.types()
    script(model, [call])
    card = turn(agent, token, "задеплой дашборд в ss-dev ещё раз", tab=tab,
                cid=first.conversation_id)
    assert card.kind == "confirm_required", card.types()
    assert card.last["reason_code"] == "confirmation_required_untrusted"
    second = turn(agent, token, "__resume__", tab=tab, cid=first.conversation_id,
                  action="confirm")
    assert second.kind == "final" and second.of("tool_end"), second.types()
    runs = audit_ok(stack, operation="deploy_dashboard")
    assert len(runs) == 2, runs
    assert len({r["idempotency_key"] for r in runs}) == 2
    assert first.of("tool_end")[0]["call_id"] != second.of("tool_end")[0]["call_id"]


def test_tool_output_raises_the_bar_for_the_writes_after_it(stack: Stack, agent: Service,
                                                            model: Service) -> None:
    """An ss-dev deploy runs without a card, unless ss-tools text is already in the turn."""
    stack.reset_sandbox()
    token = stack.token("alice")
    deploy = {"name": "deploy_dashboard", "args": {"dashboard_id": 42, "env_id": "ss-dev"}}
    script(model, [deploy])
    plain = turn(agent, token, "задеплой дашборд в ss-dev")
    assert plain.kind == "final" and plain.of("tool_end"), plain.types()
    stack.reset_sandbox()
    script(model, [{"name": "search_dashboards", "args": {"query": "x", "env_id": "ss-dev"}}],
           [deploy])
    after = turn(agent, token, "найди дашборды и задеплой дашборд в ss-dev")
    assert after.kind == "confirm_required", after.types()
    assert after.last["tool_name"] == "deploy_dashboard"
    assert after.last["permission_granted"] is True
    assert after.last["reason_code"] == "confirmation_required_untrusted"
    assert operations(stack) == ["search_dashboards"], "the deploy waits for the owner"


def test_resume_gates_against_the_tools_the_turn_offered(stack: Stack, agent: Service,
                                                         model: Service) -> None:
    """After a card is confirmed the model may call again; only the turn's offered tools run."""
    stack.reset_sandbox()
    token = stack.token("alice")
    tab = RawChat(agent.url, token, None)  # type: ignore[arg-type]
    script(model, [{"name": "deploy_dashboard", "args": {"dashboard_id": 42, "env_id": "prod"}}],
           [{"name": "start_migration", "args": {"dashboard_id": 42, "source_env": "ss-dev",
                                                 "target_env": "ss-stage"}}])
    card = turn(agent, token, "задеплой дашборд в прод", tab=tab)
    assert card.kind == "confirm_required", card.types()
    offered = seen(model)[0]["offered"]
    assert "deploy_dashboard" in offered and "start_migration" not in offered
    done = turn(agent, token, "__resume__", tab=tab, cid=card.conversation_id, action="confirm")
    assert done.kind == "final", done.types()
    assert [e["tool"] for e in done.of("tool_end")] == ["deploy_dashboard"]
    assert [(e["tool"], e["reason"]) for e in done.of("tool_error")] == [
        ("start_migration", "invalid_arguments")]
    assert "start_migration" not in operations(stack)


def test_a_confirmed_card_is_checked_again_with_the_token_of_now(stack: Stack,
                                                                 agent: Service) -> None:
    """Roles revoked while the card waited: the confirm runs nothing and says why."""
    stack.reset_sandbox()
    before = stack.token("erin", ["editor"])
    tab = RawChat(stack.agent.url, before, None)  # type: ignore[arg-type]
    card = turn(stack.agent, before, "задеплой дашборд 42 в прод", tab=tab)
    assert card.kind == "confirm_required" and card.last["permission_granted"], card.types()
    after = stack.token("erin", ["viewer"])  # the same user, the editor role taken away
    tab.headers["Authorization"] = f"Bearer {after}"
    done = turn(stack.agent, after, "__resume__", tab=tab, cid=card.conversation_id,
                action="confirm")
    assert [e["result"] for e in done.of("confirm_resolved")] == ["denied"]
    assert done.kind == "final", done.types()
    assert "tool_start" not in done.types()
    assert "editor" in done.events[-1]["content"], "the answer names the role needed"
    assert "deploy_dashboard" not in operations(stack), "only the prefetch read ran"


# -- edit and regenerate (issue 35), on this module's stack: branches from a checkpoint ----------
#
# Edit the second of three messages: the active branch is the new one, the message has two
# siblings, switching back shows the old answers and the next message continues the old branch
# (the model is sent that branch); both branches survive a restart. Regenerate twice: three
# siblings. A fork after a confirmed prod deploy does not run it again; its first event lists
# it, the model's context states it; proposed again it gets a new card, a new idempotency key
# and one new execution; the audit names each call's branch. Edit while a card is pending or a
# run is live, a bad message id: refused, nothing changed.


def fork(action: str, cid: str, message_id: str | None = None, text: str = "") -> dict[str, Any]:
    return {"text": text, "files": [], "action": action, "conversation_id": cid,
            "message_id": message_id}


def fturn(agent: Service, token: str, tab: RawChat, message: Any, *rest: Any) -> Outcome:
    out = say(agent, token, message, *rest, tab=tab, timeout=60)
    assert out.kind in ("final", "confirm_required", "error"), out.types()
    return out


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in items]


def rest_call(agent: Service, method: str, path: str, token: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, agent.url + path, headers={"Authorization": f"Bearer {token}"},
                         timeout=30, **kw)


def switch(agent: Service, token: str, cid: str, message_id: str, tab: RawChat) -> Any:
    return rest_call(agent, "POST", f"/api/assistant/conversations/{cid}/branch", token,
                     json={"message_id": message_id, "tab_id": tab.session})


def received(model: Service) -> list[dict[str, Any]]:
    return list(httpx.get(model.url + "/received", timeout=5).json()["received"])


def test_edit_switch_back_continue_and_restart(stack: Stack, agent: Service,
                                               model: Service) -> None:
    script(model)  # nothing scripted (an earlier test's leftovers): the planner answers
    alice = stack.token("alice")
    tab = RawChat(agent.url, alice, None)  # type: ignore[arg-type]
    cid = fturn(agent, alice, tab, "привет and echo 3 words").conversation_id
    assert cid is not None
    fturn(agent, alice, tab, "привет and echo 5 words", None, cid)
    fturn(agent, alice, tab, "привет and echo 7 words", None, cid)
    old = history_items(agent, alice, cid)
    assert [m["role"] for m in old] == ["user", "assistant"] * 3
    assert all(m["siblings"] is None for m in old)
    assert [m["parent_id"] for m in old] == [None, *ids(old)[:-1]]

    edited = fturn(agent, alice, tab, fork("edit", cid, old[2]["id"], "привет and echo 9 words"))
    assert edited.kind == "final", edited.types()
    first = edited.events[0]["metadata"]
    assert first["type"] == "forked" and first["seq"] == 1
    assert first["forked_from"] == {"message_id": old[2]["id"], "executed": []}
    new = history_items(agent, alice, cid)
    assert ids(new)[:2] == ids(old)[:2] and len(new) == 4
    assert new[2]["id"] == first["message_id"] and new[2]["content"] == "привет and echo 9 words"
    assert new[2]["parent_id"] == old[1]["id"]
    assert new[2]["siblings"] == {"index": 1, "count": 2, "ids": [old[2]["id"], new[2]["id"]]}
    assert "w8" in new[3]["content"]

    # Back to the old branch: its answers again; the next message continues it, and the model
    # is sent that branch, not the edit.
    assert ok(switch(agent, alice, cid, old[2]["id"], tab))["leaf_id"] == old[-1]["id"]
    back = history_items(agent, alice, cid)
    assert ids(back) == ids(old)
    assert back[2]["siblings"]["index"] == 0
    httpx.delete(model.url + "/received", timeout=5)
    assert fturn(agent, alice, tab, "__resume__", "retry", cid).kind == "final"
    sent = received(model)[-1]["user"]
    assert sent[-1] == "привет and echo 7 words" and "привет and echo 9 words" not in sent
    fturn(agent, alice, tab, "привет and echo 2 words", None, cid)
    sent = received(model)[-1]["user"]
    assert "привет and echo 5 words" in sent and "привет and echo 9 words" not in sent
    longer = history_items(agent, alice, cid)
    assert ids(longer)[:6] == ids(old) and len(longer) == 9

    agent.stop()
    agent.start(timeout=90)
    assert ids(history_items(agent, alice, cid)) == ids(longer)
    ok(switch(agent, alice, cid, new[2]["id"], tab))
    assert ids(history_items(agent, alice, cid)) == ids(new)


def test_regenerate_twice_gives_three_siblings(stack: Stack, agent: Service,
                                               model: Service) -> None:
    script(model)  # nothing scripted: the planner answers
    alice = stack.token("alice")
    tab = RawChat(agent.url, alice, None)  # type: ignore[arg-type]
    cid = fturn(agent, alice, tab, "привет and echo 4 words").conversation_id
    assert cid is not None
    for _ in range(2):
        out = fturn(agent, alice, tab, fork("regenerate", cid))
        assert out.kind == "final" and out.events[0]["metadata"]["type"] == "forked"
    items = history_items(agent, alice, cid)
    assert [m["role"] for m in items] == ["user", "assistant"]
    assert items[0]["content"] == "привет and echo 4 words"
    assert items[0]["siblings"]["count"] == 3 and items[0]["siblings"]["index"] == 2


def test_a_fork_never_replays_a_confirmed_deploy(stack: Stack, agent: Service,
                                                model: Service) -> None:
    script(model)  # nothing scripted: the planner answers
    stack.reset_sandbox()
    alice = stack.token("alice")
    tab = RawChat(agent.url, alice, None)  # type: ignore[arg-type]
    card = fturn(agent, alice, tab, "задеплой дашборд 42 в прод")
    assert card.kind == "confirm_required", card.types()
    cid, key1 = card.conversation_id, card.last["confirm_id"]
    assert cid is not None
    assert fturn(agent, alice, tab, "__resume__", "confirm", cid).kind == "final"
    assert len(audit_ok(stack, operation="deploy_dashboard")) == 1

    httpx.delete(model.url + "/received", timeout=5)
    again = fturn(agent, alice, tab, fork("regenerate", cid))
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
    assert fturn(agent, alice, tab, "__resume__", "confirm", cid).kind == "final"
    runs = audit_ok(stack, operation="deploy_dashboard")
    assert sorted(str(a["idempotency_key"]) for a in runs) == sorted([key1, key2])

    records = ok(rest_call(agent, "GET", "/api/agent/audit", alice,
                     params={"conversation_id": cid}))["items"]
    user_ids = [m["id"] for m in history_items(agent, alice, cid) if m["role"] == "user"]
    siblings = history_items(agent, alice, cid)[0]["siblings"]["ids"]
    assert user_ids == [first["message_id"]]
    assert sorted(r["branch"] for r in records) == sorted(siblings)


def settled_history(agent: Service, token: str, cid: str) -> list[dict[str, Any]]:
    """History once two reads 0.3 s apart agree."""
    seen = history_items(agent, token, cid)
    for _ in range(20):
        time.sleep(0.3)
        now = history_items(agent, token, cid)
        if now == seen:
            return now
        seen = now
    return seen


def test_refused_while_a_card_waits_or_a_run_is_live(stack: Stack, agent: Service,
                                                     model: Service) -> None:
    script(model)  # nothing scripted: the planner answers
    stack.reset_sandbox()
    alice, bob = stack.token("alice"), stack.token("bob")
    tab = RawChat(agent.url, alice, None)  # type: ignore[arg-type]
    card = fturn(agent, alice, tab, "deploy dashboard 42 to prod")
    cid = card.conversation_id
    assert card.kind == "confirm_required" and cid is not None
    before = history_items(agent, alice, cid)
    user = before[0]["id"]

    # In the conversation's language (English here), the detail says why.
    for message in (fork("edit", cid, user, "hello"), fork("regenerate", cid)):
        out = fturn(agent, alice, tab, message)
        assert out.last["code"] == "CONVERSATION_BUSY" and "card" in out.last["detail"]
    resp = switch(agent, alice, cid, user, tab)
    assert resp.status_code == 409 and resp.json()["code"] == "CONVERSATION_BUSY"
    # Bad input: another role's id, an unknown id, no text; another user's conversation.
    for message in (fork("edit", cid, before[-1]["id"], "x"), fork("edit", cid, "nope", "x"),
                    fork("edit", cid, user)):
        assert fturn(agent, alice, tab, message).last["code"] == "INVALID_REQUEST"
    assert fturn(agent, bob, RawChat(agent.url, bob, None),  # type: ignore[arg-type]
                fork("edit", cid, user, "x")).last["code"] == "NOT_FOUND"
    assert switch(agent, bob, cid, user, tab).status_code == 404
    assert history_items(agent, alice, cid) == before
    assert fturn(agent, alice, tab, "__resume__", "deny", cid).kind == "final"

    # A live run (a slow search): an edit from its tab waits for it briefly, then is refused.
    stack.fault(operation="search_dashboards", delay_s=4)
    try:
        started = say(agent, alice, "найди дашборды про продажи в ss-dev", None, cid,
                      tab=tab, drop_after=1)
        assert started.events, started.types()
        # The run stores its tool call just after its first event: read history once it
        # stands still, so what the refused edit must leave alone is all there.
        live = settled_history(agent, alice, cid)
        out = fturn(agent, alice, tab, fork("edit", cid, user, "привет"))
        assert out.last["code"] == "CONVERSATION_BUSY", out.types()
        assert history_items(agent, alice, cid) == live
    finally:
        stack.reset_sandbox()
    wait_for(lambda: (history_items(agent, alice, cid)[-1]["role"] == "assistant"
                      and len(history_items(agent, alice, cid)) > len(live)) or None,
             "the search answered", timeout=30)
