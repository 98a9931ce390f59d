"""One budget for a user's streams, and a rate for their REST writes (issue 31, hole 6).

A join used to return before the per-user limits, so one user could hold hundreds of a
replica's stream slots by joining their own run; REST appends (256 KB each, indexed for
search) had no rate at all. Here a join counts as one of the user's streams (runs and joins
together, 8 by default) and REST writes have a per-minute limit (429 RATE_LIMITED with
Retry-After, nothing stored). Next to each, what must still work: another user, a join once
the others have ended, writes under the limit.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.raw_chat import Outcome
from testkit.reliability import history_items, run, say, submit
from testkit.stack import Stack, stack_on_own_database

STREAMS = 8
WRITES = 5
ENV = {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.02",
       "AGENTCHAT_AGENT_TUNING__MAX_STREAMS_PER_USER": str(STREAMS),
       "AGENTCHAT_AGENT_TUNING__MAX_REST_WRITES_PER_MINUTE_PER_USER": str(WRITES)}
LONG = "привет and echo 400 words"  # ~8 s at 20 ms a token: the joins arrive while it streams


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    with stack_on_own_database(pg_server, migrated_template,
                               tmp_path_factory.mktemp("budget"), **ENV) as s:
        yield s


def join_message(cid: str, run_id: str) -> dict[str, Any]:
    return {"text": "", "files": [], "action": "join", "conversation_id": cid,
            "run_id": run_id}


async def joins(stack: Stack, token: str, cid: str, run_id: str, n: int) -> list[Outcome]:
    return list(await asyncio.gather(*(submit(stack.agent.url, token, join_message(cid, run_id),
                                              timeout=60) for _ in range(n))))


def test_a_join_is_one_of_the_users_streams(stack: Stack) -> None:
    token = stack.token("dora-" + uuid.uuid4().hex[:6])
    # The run goes on after its follower drops (it still holds its stream: it runs).
    started = say(stack.agent, token, LONG, drop_after=1)
    meta = started.events[0]["metadata"]
    cid, run_id = str(meta["conversation_id"]), str(meta["run_id"])

    async def twelve_and_another_user() -> tuple[list[Outcome], Outcome]:
        other = asyncio.create_task(asyncio.sleep(0.5))
        got = asyncio.create_task(joins(stack, token, cid, run_id, 12))
        await other
        # Meanwhile another user is not affected by this one's budget.
        erin = await submit(stack.agent.url, stack.token("erin"), "привет", timeout=60)
        return await got, erin

    outs, erin = run(twelve_and_another_user())
    refused = [o for o in outs if o.kind == "error"]
    followed = [o for o in outs if o.kind != "error"]
    assert {o.last["code"] for o in refused} == {"RATE_LIMITED"}, [o.types() for o in outs]
    assert all(o.last["retryable"] for o in refused)
    # The run is one stream; seven joins fill the budget of eight; five are refused.
    assert len(refused) == 12 - (STREAMS - 1), [o.kind for o in outs]
    assert all(o.kind == "final" for o in followed), [o.types() for o in followed]
    assert erin.kind == "final", erin.types()
    # The slots come back when the joins end: a join now replays the ended run.
    again = say(stack.agent, token, join_message(cid, run_id), timeout=60)
    assert again.kind == "final", again.types()


def test_rest_writes_have_a_rate(stack: Stack) -> None:
    user = "frank-" + uuid.uuid4().hex[:6]
    headers = {"Authorization": f"Bearer {stack.token(user)}"}
    base = stack.agent.url + "/api/assistant/conversations"
    with httpx.Client(timeout=10, headers=headers) as http:
        cid = http.post(base, json={"title": "rate"}).json()["id"]  # write 1
        stored = [str(uuid.uuid4()) for _ in range(WRITES - 1)]
        for mid in stored:  # writes 2..5: within the limit, stored
            resp = http.post(f"{base}/{cid}/messages",
                             json={"id": mid, "role": "user", "content": "x" * 1000})
            assert resp.status_code == 201, resp.text
        over = str(uuid.uuid4())
        resp = http.post(f"{base}/{cid}/messages",
                         json={"id": over, "role": "user", "content": "y" * 1000})
        assert resp.status_code == 429, resp.text
        assert resp.json()["code"] == "RATE_LIMITED"
        assert int(resp.headers["Retry-After"]) >= 1
        assert http.patch(f"{base}/{cid}", json={"title": "renamed"}).status_code == 429
        # Reads are not writes.
        assert http.get(base).status_code == 200
    ids = [m["id"] for m in history_items(stack.agent, stack.token(user), cid)]
    assert set(stored) <= set(ids) and over not in ids
    # Another user's writes are their own.
    other = {"Authorization": f"Bearer {stack.token('grace-' + uuid.uuid4().hex[:6])}"}
    assert httpx.post(base, json={}, headers=other, timeout=10).status_code == 201


def test_a_dropped_join_gives_its_stream_back(stack: Stack) -> None:
    token = stack.token("hugo-" + uuid.uuid4().hex[:6])
    started = say(stack.agent, token, "привет and echo 300 words", drop_after=1)
    meta = started.events[0]["metadata"]
    cid, run_id = str(meta["conversation_id"]), str(meta["run_id"])

    async def dropped_joins() -> list[Outcome]:
        return list(await asyncio.gather(*(
            submit(stack.agent.url, token, join_message(cid, run_id), drop_after=2, timeout=30)
            for _ in range(STREAMS - 1))))

    def refused(outs: list[Outcome]) -> int:
        return sum(o.last.get("code") == "RATE_LIMITED" for o in outs)

    # The run and seven joins fill the budget; each join then drops its connection.
    assert refused(run(dropped_joins())) == 0
    # Their slots come back (the generator's finally) while the run still streams: seven
    # joins are admitted again. A liveness bound only: Gradio notices a drop at its next event.
    deadline = time.monotonic() + 4  # the run streams ~6 s
    while refused(again := run(dropped_joins())) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert refused(again) == 0, [o.types() for o in again]
    assert all(o.kind != "final" for o in again), "the run ended: the test proved nothing"
