"""Streaming capacity (issue 21), from outside: a run keeps and stores its answer once (the
stored rows of a long answer grow with it, not with its square), and a join after the run
replays exactly what the submit's own stream sent, from PostgreSQL, for a trimmed run too and
for rows stored whole (before deltas); a run kept in memory stays linear; a replica at its cap
of live runs refuses a submit at once with a retryable AGENT_SATURATED, and its metrics say so.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentchat.agent.chat.run_hub import RunHub
from agentchat.agent.chat.turn_task import END_OF_STREAM, Turn
from agentchat.agent.graph.state import TurnRuntime
from agentchat.agent.settings import AgentSettings
from testkit.raw_chat import Outcome
from testkit.reliability import rows, say, wait_for, when_free
from testkit.stack import Stack, running_stack
from testkit.support import Service, create_database, drop_database

# Many small events: a paced answer, flushed often (the quadratic store showed at once).
ENV = {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.003",
       "AGENTCHAT_AGENT_TUNING__FLUSH_INTERVAL_S": "0.003", "AGENTCHAT_AGENT_MAX_LIVE_RUNS": "1"}


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
           migrated_template: str) -> Iterator[tuple[Stack, Service, Service]]:
    """The stack's own agent is the capped one (one agent fewer to start)."""
    url = create_database(pg_server, template=migrated_template)
    try:
        with running_stack(tmp_path_factory.mktemp("capacity"), url, **ENV) as stack:
            trimmed = stack.start_agent(AGENTCHAT_AGENT_TUNING__RUN_EVENTS_MAX="10")
            yield stack, stack.agent, trimmed
    finally:
        drop_database(pg_server, url)


def join(agent: Service, token: str, out: Outcome, last_seq: int) -> Outcome:
    return say(agent, token, {"text": "", "files": [], "action": "join",
                              "conversation_id": out.conversation_id,
                              "run_id": out.last["run_id"], "last_seq": last_seq})


def stored(url: str, run_id: str) -> list[dict[str, Any]]:
    return rows(url, "SELECT seq, event, length(event::text) AS size FROM run_events"
                     " WHERE run_id=%s ORDER BY seq", run_id)


def settled(url: str, run_id: str) -> list[dict[str, Any]]:
    return wait_for(lambda: rows(url, "SELECT 1 FROM runs WHERE id=%s AND status='completed'",
                                 run_id), "the run stored")


def test_a_long_answer_is_stored_once_and_a_join_replays_it_exactly(
        agents: tuple[Stack, Service, Service]) -> None:
    stack, agent, _ = agents
    alice = stack.token("alice")
    sizes = {}
    for words in (100, 400):
        out = say(agent, alice, f"echo {words} words")
        assert out.kind == "final", out.types()
        run_id, answer = out.last["run_id"], out.events[-1]["content"]
        assert len(out.events) > words // 4  # many events: the square would show
        settled(stack.database_url, run_id)
        kept = stored(stack.database_url, run_id)
        assert [r["seq"] for r in kept] == [int(e["metadata"]["seq"]) for e in out.events]
        # Only the final message carries the whole answer; every other row its own token.
        contents = sum(len(r["event"].get("content", "")) for r in kept)
        assert contents == len(answer), (contents, len(answer))
        sizes[words] = sum(r["size"] for r in kept)
        # A join after the run (from PostgreSQL) sends what the stream sent, content and all.
        for last_seq in (0, len(out.events) // 2):
            again = join(agent, alice, out, last_seq)
            assert again.events == out.events[last_seq:], last_seq
    # 4x the answer, ~4x the bytes (the square would be ~16x)
    assert sizes[400] < 6 * sizes[100], sizes


def test_rows_stored_whole_still_replay(agents: tuple[Stack, Service, Service]) -> None:
    """Rows written before deltas carry each event's content: a join sends them as stored."""
    stack, agent, _ = agents
    alice = stack.token("alice")
    out = say(agent, alice, "echo 40 words")
    assert out.kind == "final"
    run_id = out.last["run_id"]
    settled(stack.database_url, run_id)
    for e in out.events:  # rewrite the run's rows as the old writer stored them
        rows(stack.database_url, "UPDATE run_events SET event=%s::jsonb WHERE run_id=%s"
             " AND seq=%s RETURNING seq", json.dumps(e), run_id, e["metadata"]["seq"])
    assert all("content" in r["event"] for r in stored(stack.database_url, run_id))
    assert join(agent, alice, out, 3).events == out.events[3:]


def test_a_trimmed_run_replays_the_whole_answer_so_far(
        agents: tuple[Stack, Service, Service]) -> None:
    stack, _, trimmed = agents
    alice = stack.token("alice")
    out = say(trimmed, alice, "echo 60 words")
    assert out.kind == "final" and len(out.events) > 12, out.types()
    settled(stack.database_url, out.last["run_id"])
    kept = stored(stack.database_url, out.last["run_id"])
    assert len(kept) == 10 and "_base" in kept[0]["event"]
    last = len(out.events)
    assert join(trimmed, alice, out, last - 10).events == out.events[last - 10:]


def test_a_run_in_memory_is_linear() -> None:
    """The RunHub's own record of a 2,000-token answer (no database: the log off) holds the
    answer once: its events add the tokens' size, not the answer's per event."""
    async def kept_bytes(tokens: int) -> tuple[int, str]:
        hub = RunHub(settings=AgentSettings(mode="dev", tuning={
                         "run_events": False, "flush_interval_s": 0.0, "flush_events_per_s": 0.0}),
                     pool=None)  # type: ignore[arg-type]
        turn = Turn("c1", "t1", "s1", TurnRuntime(conversation_id="c1", user_jwt="", tools=[]),
                    None)
        run = hub.start(turn, "message", [])
        for i in range(tokens):
            turn.emit({"type": "stream_token", "token": f"w{i} "})
            await asyncio.sleep(0)  # one event per token: the worst case for the old store
        turn.emit({"type": "final", "message_id": "m1", "content": run.text})
        turn.emit(END_OF_STREAM)
        sent = [m async for m in run.follow(0)]
        assert sent[-2]["content"] == run.text and len(sent) >= tokens // 2
        return sum(len(json.dumps(m)) for m in run.events), run.text

    size, text = asyncio.run(kept_bytes(2000))
    small, _ = asyncio.run(kept_bytes(500))
    assert size < 5 * small  # 4x the answer, ~4x the bytes (the square: ~16x)
    assert size < 200 * len(text)


def test_a_replica_at_its_cap_refuses_at_once_and_says_so(
        agents: tuple[Stack, Service, Service]) -> None:
    stack, agent, _ = agents
    alice = stack.token("alice")
    first: dict[str, Outcome] = {}
    running = threading.Event()

    def on_event(out: Outcome) -> None:
        running.set()

    worker = threading.Thread(target=lambda: first.setdefault(
        "out", say(agent, alice, "echo 600 words", on_event=on_event)))
    worker.start()
    assert running.wait(30)
    metrics = httpx.get(agent.url + "/metrics", timeout=10).text
    assert "agentchat_live_runs 1.0" in metrics
    started = time.monotonic()
    refused = say(agent, alice, "привет")
    took = time.monotonic() - started
    worker.join(60)
    assert refused.kind == "error" and refused.last["code"] == "AGENT_SATURATED", refused.types()
    assert refused.last["retryable"] is True and len(refused.events) == 1
    assert took < 5.0, took  # at once, not after the live run
    assert first["out"].kind == "final"
    metrics = httpx.get(agent.url + "/metrics", timeout=10).text
    assert "agentchat_saturated_total 1.0" in metrics
    assert "agentchat_live_runs 0.0" in metrics
    assert "agentchat_event_gap_seconds_count" in metrics
    assert "agentchat_first_token_seconds_count" in metrics


def test_a_turn_saves_one_checkpoint_at_its_end_with_the_whole_exchange(
        agents: tuple[Stack, Service, Service]) -> None:
    """Checkpoints are saved when a run exits (turns.DURABILITY), not before and after every
    step: one per plain turn, holding what the next turn's model reads."""
    from langgraph.checkpoint.postgres import PostgresSaver

    stack, agent, _ = agents
    alice = stack.token("alice")
    # One tab's two messages (its tab_id): another tab would wait out the lease (30 s).
    tab = "tab-" + uuid.uuid4().hex

    def message(text: str) -> dict[str, Any]:
        return {"text": text, "files": [], "tab_id": tab}

    first = say(agent, alice, message("echo 5 words"))
    assert first.kind == "final", first.types()
    cid = first.conversation_id
    second = when_free(lambda: say(agent, alice, message("echo 3 words"), None, cid))
    assert second.kind == "final", second.types()
    count = "SELECT count(*) AS n FROM checkpoints WHERE thread_id=%s"
    assert rows(stack.database_url, count, cid)[0]["n"] == 2
    with PostgresSaver.from_conn_string(stack.database_url) as saver:
        saved = saver.get_tuple({"configurable": {"thread_id": cid}})
    assert saved is not None
    messages = saved.checkpoint["channel_values"]["messages"]
    assert [(m.type, m.content) for m in messages] == [
        ("human", "echo 5 words"), ("ai", first.events[-1]["content"]),
        ("human", "echo 3 words"), ("ai", second.events[-1]["content"])]
