"""What a user's MCP calls may hold, and for how long (agent/chat/gated_calls.py,
agent/chat/sweeper.py `CallRetention`, agent/chat/gated_tools.py), on the real sidecar, sandbox
and PostgreSQL of a running stack, through the door `GatedCalls` as the MCP adapter calls it and
the requester's REST routes on the stack's agent:

- a user holds at most `pending_cap` calls waiting for an answer, however many are stored at
  once: the next is refused RATE_LIMITED (with retry_after) and nothing is stored; an expired
  or answered call no longer counts; another user's are not counted;
- finished or expired calls past their retention are deleted with their approvals, a pending
  or recent one stays, and the audit records stay;
- a tool list is kept a few seconds per user, token and catalog revision.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from agentchat.agent.chat import GatedCalls, Pending, Refused
from agentchat.agent.chat.sweeper import CallRetention
from agentchat.db import create_pool
from agentchat.errors import ErrorCode
from agentchat.identity import Principal
from testkit.gated import caller, gated_stack, make_door
from testkit.stack import Stack

KEY = "gated-bounds-test-key-0123456789abcdef"
CAP = 2
STAGE = {"dashboard_id": 42, "env_id": "ss-stage"}  # a card the catalog needs: on the page
PROD = {"dashboard_id": 42, "env_id": "prod"}  # four eyes: an approval


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    with gated_stack(pg_server, migrated_template, tmp_path_factory.mktemp("bounds"), KEY) as s:
        yield s


@pytest.fixture(scope="module")
async def doors(stack: Stack) -> AsyncIterator[dict[str, GatedCalls]]:
    pool = create_pool(stack.database_url, max_size=6)
    await pool.open(wait=True)
    async with httpx.AsyncClient() as http:
        yield {"long": make_door(stack, pool, http, KEY, pending_cap=CAP, tools_cache_s=2.0),
               "short": make_door(stack, pool, http, KEY, pending_cap=CAP,
                                  confirmation_ttl_s=1.5, tools_cache_s=0.5)}
    await pool.close()


def pending_ids(stack: Stack, user: str) -> list[str]:
    resp = httpx.get(f"{stack.agent.url}/api/agent/calls", timeout=30,
                     headers={"Authorization": f"Bearer {stack.token(user, ['editor'])}"})
    assert resp.status_code == 200, resp.text
    return [i["call_id"] for i in resp.json()["items"]]


def deny_on_page(stack: Stack, user: str, call: Pending) -> dict[str, object]:
    resp = httpx.post(f"{stack.agent.url}/api/agent/calls/{call.call_id}", timeout=30,
                      headers={"Authorization": f"Bearer {stack.token(user, ['editor'])}"},
                      json={"decision": "deny", "args_digest": call.args_digest})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def test_a_user_holds_at_most_the_cap_of_waiting_calls(stack: Stack,
                                                             doors: dict[str, GatedCalls]) -> None:
    door = doors["long"]
    bob = caller(stack, "bob", ["editor"])
    # Five at once (the pool's connections: concurrent transactions): exactly CAP are stored.
    outcomes = await asyncio.gather(*(door.call(bob, "deploy_dashboard", STAGE, can_elicit=False)
                                      for _ in range(5)))
    stored = [o for o in outcomes if isinstance(o, Pending)]
    refused = [o for o in outcomes if isinstance(o, Refused)]
    assert len(stored) == CAP and len(refused) == 5 - CAP, outcomes
    over = refused[0]
    assert over.code is ErrorCode.RATE_LIMITED and over.retry_after and over.retry_after > 0
    assert "nothing was stored" in over.detail
    assert over.structured() == {"code": "RATE_LIMITED", "detail": over.detail,
                                 "retry_after": over.retry_after}
    assert sorted(pending_ids(stack, "bob")) == sorted(o.call_id for o in stored)
    # An approval waits too, and counts: refused as well; another user is not counted.
    again = await door.call(bob, "deploy_dashboard", PROD, can_elicit=False)
    assert isinstance(again, Refused) and again.code is ErrorCode.RATE_LIMITED
    carl = await door.call(caller(stack, "carl", ["editor"]), "deploy_dashboard", STAGE,
                           can_elicit=False)
    assert isinstance(carl, Pending)
    # An answered call frees its place.
    assert deny_on_page(stack, "bob", stored[0])["status"] == "denied"
    assert isinstance(await door.call(bob, "deploy_dashboard", STAGE, can_elicit=False), Pending)


async def test_an_expired_call_does_not_count(stack: Stack, doors: dict[str, GatedCalls]) -> None:
    door = doors["short"]  # its cards live 1.5 s
    dora = caller(stack, "dora", ["editor"])
    for _ in range(CAP):
        assert isinstance(await door.call(dora, "deploy_dashboard", STAGE, can_elicit=False),
                          Pending)
    full = await door.call(dora, "deploy_dashboard", STAGE, can_elicit=False)
    assert isinstance(full, Refused) and full.code is ErrorCode.RATE_LIMITED
    assert full.retry_after is not None and full.retry_after <= 2
    await asyncio.sleep(1.7)
    assert pending_ids(stack, "dora") == []
    assert isinstance(await door.call(dora, "deploy_dashboard", STAGE, can_elicit=False),
                      Pending)


async def test_old_finished_calls_go_with_their_approvals(stack: Stack,
                                                          doors: dict[str, GatedCalls]) -> None:
    door = doors["long"]
    erin = caller(stack, "erin", ["editor"])
    old_denied = await door.call(erin, "deploy_dashboard", STAGE, can_elicit=False)
    old_approval = await door.call(erin, "deploy_dashboard", PROD, can_elicit=False)
    assert isinstance(old_denied, Pending) and isinstance(old_approval, Pending)
    assert old_approval.status == "approval_required"
    await door.answer(_principal("erin"), erin.user_jwt, old_denied.call_id, "deny",
                      old_denied.args_digest)
    await door.answer(_principal("erin"), erin.user_jwt, old_approval.call_id, "deny",
                      old_approval.args_digest)
    fred = caller(stack, "fred", ["editor"])
    recent = await door.call(fred, "deploy_dashboard", STAGE, can_elicit=False)
    old_pending = await door.call(fred, "deploy_dashboard", PROD, can_elicit=False)
    assert isinstance(recent, Pending) and isinstance(old_pending, Pending)
    await door.answer(_principal("fred"), fred.user_jwt, recent.call_id, "deny",
                      recent.args_digest)
    # Forty days pass for erin's two calls and fred's approval, which is still pending (its
    # expiry with them: an approval's own, days ahead, would keep it).
    old = [old_denied.call_id, old_approval.call_id, old_pending.call_id]
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        conn.execute("""UPDATE gated_calls SET created_at = created_at - interval '40 days',
                            answered_at = answered_at - interval '40 days'
                         WHERE call_id = ANY(%s)""", (old,))
        conn.execute("UPDATE gated_calls SET expires_at = now() + interval '1 day'"
                     " WHERE call_id = %s", (old_pending.call_id,))
        approvals_before = _approvals(conn, old)
    assert approvals_before == {old_approval.call_id, old_pending.call_id}

    retention = CallRetention(db=door.pool, days=30, interval_s=3600, batch=1)
    assert await retention.maybe_prune() == 2  # in batches of one
    assert await retention.maybe_prune() is None  # not due again
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        left = {r[0] for r in conn.execute("SELECT call_id FROM gated_calls WHERE call_id"
                                           " = ANY(%s)", ([*old, recent.call_id],))}
        assert left == {old_pending.call_id, recent.call_id}
        assert _approvals(conn, old) == {old_pending.call_id}
        audited = {r[0] for r in conn.execute(
            "SELECT DISTINCT conversation_id FROM audit_rows WHERE conversation_id = ANY(%s)",
            (old,))}
    assert old_denied.call_id in audited and old_approval.call_id in audited
    assert await CallRetention(db=door.pool, days=0, interval_s=1).maybe_prune() is None


async def test_a_tool_list_is_kept_seconds(stack: Stack) -> None:
    asked: list[str] = []  # the sidecar's /v1/permissions requests, as the door sends them
    pool = create_pool(stack.database_url, max_size=2)
    await pool.open(wait=True)
    async with httpx.AsyncClient() as http:
        door = make_door(stack, pool, http, KEY, pending_cap=CAP, tools_cache_s=0.5)
        wire = door.gate.policy.wire
        send = wire.post

        async def seen(path: str, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
            if path.endswith("/permissions"):
                asked.append(path)
            return await send(path, *args, **kwargs)

        wire.post = seen  # type: ignore[method-assign]
        envs = len(door.catalogs.current().environments) + 1  # each, and none
        vera = caller(stack, "vera", ["viewer"])
        first = await door.tools_for(vera)
        assert len(asked) == envs
        assert [await door.tools_for(vera) for _ in range(5)][-1] == first
        assert len(asked) == envs  # kept
        # One token for the five (two minted a second apart differ, and are asked apart).
        editor = caller(stack, "vera", ["editor"])
        together = await asyncio.gather(*(door.tools_for(editor) for _ in range(5)))
        assert len(asked) == 2 * envs  # another token: asked once for the five at once
        assert len(together[0]) > len(first)
        await asyncio.sleep(0.6)
        assert await door.tools_for(vera) == first
        assert len(asked) == 3 * envs  # past its time: asked again
    await pool.close()


def _principal(sub: str) -> Principal:
    return Principal(sub=sub, roles=(("editor", None),))


def _approvals(conn: psycopg.Connection[tuple[str]], ids: list[str]) -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT approval_id FROM approvals WHERE approval_id = ANY(%s)", (ids,))}
