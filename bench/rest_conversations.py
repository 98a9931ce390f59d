"""Benchmark: the Conversations REST API's queries on 10,000 conversations and 1,000,000
messages across 1,000 users, against a primary-key lookup in the same run.

Seeds its own database with COPY (dropped at the end unless --keep). Owners are skewed like a
real installation: 10 heavy users hold half the conversations (500 each, ~50,000 messages),
the other 990 share the rest. Each request runs the very functions the routes call
(`agentchat.agent.storage.conversations`, `agentchat.agent.storage.history`, the cursor
decoded and the next one encoded as the routes do) on a pool, one at a time:

- pk: `SELECT … FROM conversations WHERE id = %s` (the baseline)
- first_page: the list's first page (20) for a random user
- deep_page: page 20 (conversations 381-400) of a heavy user, reached by its cursor
- search_common / search_rare: `q` with a word in 1/4 of all messages ("дашборды") / in ~100
  messages, for heavy and light users alike; search_common_heavy: a word in 1/8 ("dashboards"),
  heavy users only (~6,250 of their messages; migration 4's costliest search)
- search_title: a word only titles hold
- search_absent_heavy: the worst case, a heavy user searching a word that 1/8 of the other
  users' messages hold and none of theirs
- history_first / history_deep: a conversation's newest 50 messages / its oldest page

Goal: every request under 20 ms p99, query plans on indexes (printed as EXPLAIN lines).

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/rest_conversations.py [--requests 300] [--keep]

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from agentchat.agent.api.cursors import (
    conversation_key,
    decode_conversation_key,
    decode_history_key,
    history_key,
)
from agentchat.agent.storage import conversations, history
from agentchat.db import create_pool, migrate
from common import scratch_database

USERS, CONVERSATIONS, MESSAGES = 1_000, 10_000, 1_000_000
HEAVY_USERS, HEAVY_SHARE = 10, 0.5
SENTENCES = [
    "Покажи дашборды по энергопотреблению за прошлый месяц",
    "Found 3 dashboards matching your query about sales revenue",
    "Задеплой дашборд {n} в прод, пожалуйста",
    "The deployment finished successfully; the task id is {n}",
    "Какие окна обслуживания запланированы на этой неделе?",
    "Health summary: all environments are healthy except ss-stage",
    "Экспортируй конфигурацию датасета {n} в YAML",
    "Migrating datasets between environments requires read access",
]
TITLES = ["Отчёт по энергопотреблению", "Deploy to prod", "Проверка здоровья",
          "Maintenance window plan", "Миграция датасетов", "Sales dashboards review"]
RARE_WORDS = [f"кодовоеслово{i}" for i in range(10_000)]  # each in ~100 messages


def owners() -> list[str]:
    heavy = int(CONVERSATIONS * HEAVY_SHARE)
    light = [f"user{HEAVY_USERS + i % (USERS - HEAVY_USERS)}"
             for i in range(CONVERSATIONS - heavy)]
    return [f"user{i % HEAVY_USERS}" for i in range(heavy)] + light


async def seed(url: str) -> dict[str, Any]:
    rng = random.Random(7)
    now = datetime.now(UTC)
    conv_ids = [str(uuid.uuid4()) for _ in range(CONVERSATIONS)]
    who = owners()
    heavy_count = int(CONVERSATIONS * HEAVY_SHARE)  # owners() puts them first
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)
        async with conn.cursor() as cur, cur.copy(
                "COPY conversations (id, owner, title, created_at, last_activity_at) "
                "FROM STDIN") as copy:
            for i, cid in enumerate(conv_ids):
                at = now - timedelta(minutes=i * 3)
                await copy.write_row((cid, who[i], f"{rng.choice(TITLES)} {i}",
                                      at - timedelta(days=1), at))
        async with conn.cursor() as cur, cur.copy(
                "COPY messages (id, conversation_id, role, content, created_at) "
                "FROM STDIN") as copy:
            for j in range(MESSAGES):
                # round-robin over conversations; the shift makes each one cycle through
                # every sentence (else conversation k would repeat sentence k % 8)
                text = SENTENCES[(j + j // CONVERSATIONS) % len(SENTENCES)].format(n=j % 997)
                if j % CONVERSATIONS >= heavy_count and j % 4 == 1:
                    text += " Инцидент закрыт"  # only light users' conversations say it
                if j % 100 == 0:
                    text += " " + RARE_WORDS[(j // 100) % len(RARE_WORDS)]
                await copy.write_row((f"m{j}", conv_ids[j % CONVERSATIONS],
                                      "user" if j % 2 == 0 else "assistant", text,
                                      now - timedelta(seconds=MESSAGES - j)))
        await conn.execute("VACUUM ANALYZE conversations")
        await conn.execute("VACUUM ANALYZE messages")
    return {"conversation_ids": conv_ids, "owners": who,
            "seed_s": round(time.perf_counter() - started, 1)}


def pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"p50_ms": round(statistics.median(s), 2),
            "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))], 2),
            "max_ms": round(s[-1], 2)}


async def measure(n: int, make: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    for i in range(20):  # warm the pool's backends (dictionaries, plans' catalog reads)
        await make(i)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        await make(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return pct(samples)


async def explain(pool: Any, sql: str, params: dict[str, Any]) -> list[str]:
    async with pool.connection() as conn:
        cur = await conn.execute("EXPLAIN (COSTS OFF) " + sql, params)
        return [r["QUERY PLAN"] for r in await cur.fetchall()]


async def explain_inside(pool: Any, sql: str, params: dict[str, Any]) -> list[str]:
    """The plan of the first statement a function runs inside `sql` (owner_search's), which
    EXPLAIN shows only as a function call: auto_explain sends it to the client as a notice."""
    notices: list[str] = []
    async with pool.connection() as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                        "SET auto_explain.log_nested_statements = on",
                        "SET client_min_messages = log"):
            await conn.execute(setting)
        try:
            await conn.execute(sql, params)
        finally:
            await conn.execute("RESET client_min_messages")
            await conn.execute("SET auto_explain.log_min_duration = -1")
    # "duration: … plan:", "Query Text: …" and the statement's indented lines, then the plan
    lines = notices[0].splitlines()[2:] if notices else []
    while lines and (not lines[0].strip() or lines[0][0].isspace()):
        lines.pop(0)
    return lines


async def run(url: str, requests: int) -> dict[str, Any]:
    data = await seed(url)
    ids, who = data["conversation_ids"], data["owners"]
    heavy = [f"user{i}" for i in range(HEAVY_USERS)]
    users = sorted(set(who))
    rng = random.Random(11)
    pool = create_pool(url, min_size=4, max_size=4)
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            # the cursor of page 19's last row, for each heavy user: page 20 comes next
            deep: dict[str, str] = {}
            for u in heavy:
                cur = await conn.execute(
                    "SELECT last_activity_at, id FROM conversations WHERE owner = %s "
                    "ORDER BY last_activity_at DESC, id DESC OFFSET 379 LIMIT 1", (u,))
                row = await cur.fetchone()
                deep[u] = conversation_key(row["last_activity_at"], row["id"])

        # what the routes do: the cursor decoded, the storage function, the next cursor
        async def list_page(owner: str, cursor: str | None = None,
                            q: str | None = None) -> tuple[list[Any], str | None]:
            after = decode_conversation_key(cursor) if cursor else None
            items, key = await conversations.list_conversations(
                pool, owner=owner, limit=20, after=after, q=q, include_archived=False)
            return items, None if key is None else conversation_key(*key)

        async def history_page(i: int, cursor: str | None) -> tuple[list[Any], str | None]:
            before = decode_history_key(cursor) if cursor else None
            items, pos = await history.read_history(
                pool, owner=who[i % len(ids)], conversation_id=ids[i % len(ids)], limit=50,
                before=before)
            return items, None if pos is None else history_key(pos)

        def lister(user: Callable[[int], str], **kw: Any) -> Callable[[int], Awaitable[Any]]:
            return lambda i: list_page(user(i), **kw)

        async def pk(i: int) -> Any:
            async with pool.connection() as conn:
                cur = await conn.execute(conversations.GET_OWNED,
                                         {"id": ids[i % len(ids)], "owner": who[i % len(ids)]})
                return await cur.fetchone()

        def any_user(i: int) -> str:
            return users[rng.randrange(len(users))]

        def mixed(i: int) -> str:  # heavy and light users alternately
            return heavy[i % HEAVY_USERS] if i % 2 else any_user(i)

        results = {
            "pk": await measure(requests, pk),
            "first_page": await measure(requests, lister(any_user)),
            "first_page_heavy": await measure(requests, lister(lambda i: heavy[i % 10])),
        }
        results["deep_page"] = await measure(
            requests, lambda i: list_page(heavy[i % 10], cursor=deep[heavy[i % 10]]))
        results["search_common"] = await measure(requests, lister(mixed, q="дашборды"))
        results["search_common_heavy"] = await measure(
            requests, lister(lambda i: heavy[i % 10], q="dashboards"))
        results["search_rare"] = await measure(
            requests, lister(mixed, q=RARE_WORDS[rng.randrange(len(RARE_WORDS))]))
        results["search_rare_heavy"] = await measure(
            requests, lambda i: list_page(heavy[i % 10],
                                          q=RARE_WORDS[rng.randrange(len(RARE_WORDS))]))
        results["search_title"] = await measure(requests, lister(mixed, q="обслуживание plan"))
        # migration 1's worst case: a heavy user, a word common elsewhere but in none of their
        # messages (every one of their 500 conversations was checked)
        results["search_absent_heavy"] = await measure(
            requests, lister(lambda i: heavy[i % 10], q="инциденты"))
        results["history_first"] = await measure(requests, lambda i: history_page(i, None))
        results["history_deep"] = await measure(requests, lambda i: history_page(
            # messages are COPY'd round-robin, so conversation k's are pos k+1, k+10001, …:
            # this cursor pages to its oldest 50
            i, history_key(i % len(ids) + 1 + CONVERSATIONS * 50)))

        def q(searching: bool, after: bool = False) -> str:
            return conversations.list_query(searching=searching, include_archived=False,
                                            after=after)
        after_ts, after_id = decode_conversation_key(deep["user0"])
        plans = {
            "pk": await explain(pool, conversations.GET_OWNED, {"id": ids[0], "owner": who[0]}),
            "first_page": await explain(pool, q(False), {"owner": "user500", "limit": 21}),
            "deep_page": await explain(pool, q(False, True), {
                "owner": "user0", "limit": 21, "after_ts": after_ts, "after_id": after_id}),
            "search_heavy": await explain(pool, q(True), {"owner": "user0", "limit": 21,
                                                          "q": RARE_WORDS[5]}),
            "search_absent_heavy": await explain(pool, q(True), {
                "owner": "user0", "limit": 21, "q": "инциденты"}),
            "owner_search_inside": await explain_inside(
                pool, "SELECT owner_search(%(owner)s, %(q)s)", {"owner": "user0",
                                                                 "q": "дашборды"}),
            "history_first": await explain(pool, history.PAGE.format(after=""),
                                           {"id": ids[0], "limit": 51}),
        }
    finally:
        await pool.close()
    worst = max(r["p99_ms"] for k, r in results.items() if k != "pk")
    return {"benchmark": "rest_conversations", "users": USERS, "conversations": CONVERSATIONS,
            "messages": MESSAGES, "heavy_users": HEAVY_USERS,
            "heavy_user_conversations": int(CONVERSATIONS * HEAVY_SHARE) // HEAVY_USERS,
            "requests_each": requests, "seed_s": data["seed_s"], "results": results,
            "worst_p99_ms": worst, "goal_p99_ms": 20, "goal_met": worst < 20,
            "plans": plans}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the seeded database")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rest-bench-") as tmp, \
            scratch_database(Path(tmp), keep=args.keep) as url:
        result = asyncio.run(run(url, args.requests))
    for key, lines in result["plans"].items():
        print(f"EXPLAIN {key}:\n  " + "\n  ".join(lines))
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
