"""Bounded soak: simulated users against two agent replicas (a sidecar each) on one database.

Each user is one browser tab on one replica (its own Gradio session) with a realistic mix:
plain questions, tool calls, cards answered after a random delay (confirmed or denied),
cancels, dropped connections and history reads (through the other replica). After
`--seconds` no new action starts; running ones finish (bounded), then the books are checked:

- turns_lost: a final answer the client got that is not stored, an admitted message that is
  not stored, or a turn still `running` after the drain (goal 0);
- confirmed_not_executed_once: cards the client saw confirmed whose call is not exactly one
  execution in the sandbox audit (goal 0); denied_but_executed likewise;
- turns by outcome and error code, p50/p99 time to first token and gap between events,
  memory (RSS) of every process at start, middle and end, database growth per turn.

Only 127.0.0.1 is contacted. Run: `make soak SOAK_SECONDS=600` or
`python bench/soak.py --seconds 120 --users 200`. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

from agentchat.db import embedded_url
from agentchat.sandbox.data import seed_dashboards
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import start_replica
from testkit.stack import Stack, running_stack
from testkit.support import Service, create_database, drop_database

ROOT = Path(__file__).resolve().parent.parent

ROLES = ["editor@ss-dev", "editor@ss-stage", "viewer@prod"]
PLAIN = ["привет", "что ты умеешь?", "hello, what can you do?", "привет and echo 40 words",
         "привет and echo 400 words"]
TOOLS = ["найди дашборды про энергопотребление", "покажи окна обслуживания в ss-dev",
         "какие есть окружения?", "find dashboards about sales", "покажи список миграций"]
DASHBOARDS = [i for i, d in seed_dashboards().items() if d["envs"]]
# (action, weight): a realistic mix, questions and tool calls first.
MIX = [("plain", 25), ("tool", 25), ("card", 18), ("cancel", 8), ("drop", 8), ("history", 12),
       ("new_conversation", 4)]


@dataclass
class Books:
    outcomes: Counter[str] = field(default_factory=Counter)
    first_token_s: list[float] = field(default_factory=list)
    gaps_s: list[float] = field(default_factory=list)
    token_gaps_s: list[float] = field(default_factory=list)
    finals: dict[str, str] = field(default_factory=dict)          # message_id -> conversation
    admitted: Counter[str] = field(default_factory=Counter)       # conversation -> new turns
    confirmed: set[str] = field(default_factory=set)
    denied: set[str] = field(default_factory=set)
    history_reads: int = 0
    history_errors: int = 0
    actions: int = 0

    def record(self, kind: str, out: Outcome, new_turn: bool) -> None:
        self.actions += 1
        label = out.kind if out.kind != "error" else f"error:{out.last.get('code')}"
        self.outcomes[f"{kind}->{label}"] += 1
        if out.first_token_s is not None:
            self.first_token_s.append(out.first_token_s)
        self.gaps_s.extend(out.gaps_s)
        self.token_gaps_s.extend(out.token_gaps_s)
        cid = out.conversation_id
        for e in out.events:
            meta = e["metadata"]
            if meta.get("message_id") and cid:
                self.finals[str(meta["message_id"])] = cid
            if meta.get("type") == "confirm_resolved":
                (self.confirmed if meta["result"] == "confirmed" else self.denied).add(
                    str(meta["confirm_id"]))
        # An admitted message: the first event is not a refusal (BUSY, INVALID_REQUEST, …).
        first = out.events[0]["metadata"] if out.events else {}
        if new_turn and cid and first and first.get("type") != "error":
            self.admitted[cid] += 1


class User:
    def __init__(self, n: int, stack: Stack, home: Service, other: Service,
                 http: httpx.AsyncClient, books: Books, rng: random.Random) -> None:
        self.n, self.home, self.other, self.http, self.books, self.rng = (
            n, home, other, http, books, rng)
        self.token = stack.token(f"soak-{n}", ROLES)
        self.tab = RawChat(home.url, self.token, http)
        self.cid: str | None = None

    async def act(self) -> None:
        kind = self.rng.choices([m for m, _ in MIX], [w for _, w in MIX])[0]
        if kind == "new_conversation" or (self.cid is None and kind == "history"):
            self.cid = None
            kind = "plain"
        if kind == "history":
            await self.read_history()
            return
        if kind == "plain":
            await self.say(kind, self.rng.choice(PLAIN))
        elif kind == "tool":
            await self.say(kind, self.rng.choice(TOOLS))
        elif kind == "drop":
            await self.say(kind, self.rng.choice(TOOLS), drop_after=2)
        elif kind == "cancel":
            await self.cancel()
        elif kind == "card":
            await self.card()

    async def say(self, kind: str, text: str, **kw: Any) -> Outcome:
        out = await self.tab.submit(text, None, self.cid, timeout=180, **kw)
        self.books.record(kind, out, new_turn=True)
        self.cid = out.conversation_id or self.cid
        return out

    async def card(self) -> None:
        dashboard = self.rng.choice(DASHBOARDS)
        out = await self.say("card", f"задеплой дашборд {dashboard} в ss-stage")
        if out.kind != "confirm_required":
            return
        await asyncio.sleep(self.rng.uniform(0.5, 8.0))  # the user reads the card
        action = "confirm" if self.rng.random() < 0.7 else "deny"
        answer = await self.tab.submit({"text": "__resume__", "files": [],
                                        "confirm_id": out.last["confirm_id"]}, action, self.cid,
                                       timeout=180)
        self.books.record(action, answer, new_turn=False)

    async def cancel(self) -> None:
        """A long answer stopped shortly after it starts (the frontend's Stop)."""
        seen: dict[str, Outcome] = {}
        started = asyncio.Event()

        def on_event(out: Outcome) -> None:
            seen["out"] = out
            started.set()

        task = asyncio.create_task(self.tab.submit("привет and echo 200 words", None, self.cid,
                                                   timeout=180, on_event=on_event))
        try:
            await asyncio.wait_for(started.wait(), 60)
        except TimeoutError:
            pass
        else:
            await asyncio.sleep(self.rng.uniform(0.2, 1.5))
            if not task.done():
                await self.tab.cancel(seen["out"])
        out = await task
        self.books.record("cancel", out, new_turn=True)
        self.cid = out.conversation_id or self.cid

    async def read_history(self) -> None:
        self.books.history_reads += 1
        try:
            resp = await self.http.get(self.other.url + "/api/assistant/history", timeout=60,
                                       params={"conversation_id": self.cid, "limit": 50},
                                       headers={"Authorization": f"Bearer {self.token}"})
            if resp.status_code != 200:
                self.books.history_errors += 1
        except httpx.HTTPError:
            self.books.history_errors += 1


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)


def rss(services: dict[str, Service]) -> dict[str, float]:
    out = {}
    for name, svc in services.items():
        try:
            out[name] = round(psutil.Process(svc.proc.pid).memory_info().rss / 2**20, 1)  # type: ignore[union-attr]
        except (psutil.Error, AttributeError):
            out[name] = -1.0
    return out


def trend(samples: list[dict[str, float]], names: list[str]) -> dict[str, float | None]:
    """Least-squares slope of RSS against actions served, per process."""
    out: dict[str, float | None] = {}
    for name in names:
        xs = [s["actions"] for s in samples]
        ys = [s[name] for s in samples]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        out[name] = round(1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
                          / var, 2) if var else None
    return out


def db_size(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0


async def user_loop(user: User, stop_at: float, rng: random.Random, think: tuple[float, float]
                    ) -> None:
    await asyncio.sleep(rng.uniform(0, think[1]))  # users arrive spread out
    while time.monotonic() < stop_at:
        await user.act()
        await asyncio.sleep(rng.uniform(*think))


def check_books(stack: Stack, books: Books) -> dict[str, Any]:
    url = stack.database_url
    with psycopg.connect(url) as conn:
        stored = {r[0] for r in conn.execute(
            "SELECT id FROM messages WHERE id = ANY(%s)", (list(books.finals),))}
        users = dict(conn.execute(
            "SELECT conversation_id, count(*) FROM messages WHERE role='user'"
            " AND conversation_id = ANY(%s) GROUP BY 1", (list(books.admitted),)).fetchall())
        running = conn.execute("SELECT count(*) FROM turns WHERE status='running'").fetchone()
        statuses = dict(conn.execute(
            "SELECT coalesce(error_code, status), count(*) FROM turns GROUP BY 1").fetchall())
        dangling = conn.execute("SELECT count(*) FROM tool_calls WHERE outcome='running'"
                                ).fetchone()
        n_turns = conn.execute("SELECT count(*) FROM turns").fetchone()
    missing_finals = len(set(books.finals) - stored)
    missing_users = sum(max(0, n - int(users.get(cid, 0))) for cid, n in books.admitted.items())
    still_running = int(running[0]) if running else 0
    audit = stack.audit()
    # An execution is a request that reached the operation (a replay of the key is not).
    executions = Counter(a["idempotency_key"] for a in audit
                         if a["operation"] == "deploy_dashboard" and a["outcome"] != "replayed")
    ok = Counter(a["idempotency_key"] for a in audit
                 if a["operation"] == "deploy_dashboard" and a["outcome"] == "ok")
    return {
        "turns_lost": missing_finals + missing_users + still_running,
        "lost_detail": {"finals_not_stored": missing_finals,
                        "messages_not_stored": missing_users, "turns_left_running": still_running,
                        "tool_calls_left_running": int(dangling[0]) if dangling else 0},
        "confirmed": len(books.confirmed),
        "confirmed_not_executed_once": sum(1 for k in books.confirmed if executions[k] != 1),
        "confirmed_executed_ok": sum(1 for k in books.confirmed if ok[k] == 1),
        "denied_but_executed": sum(1 for k in books.denied if executions[k]),
        "turns_stored": int(n_turns[0]) if n_turns else 0,
        "turns_by_status_or_code": statuses,
    }


async def soak(stack: Stack, b: Service, policy_b: Service,
               args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    books = Books()
    assert stack.policy is not None and stack.sandbox is not None
    procs = {"agent_a": stack.agent, "agent_b": b, "sandbox": stack.sandbox,
             "policy_a": stack.policy, "policy_b": policy_b}
    limits = httpx.Limits(max_connections=args.users * 3, max_keepalive_connections=args.users)
    async with httpx.AsyncClient(limits=limits) as http:
        users = [User(i, stack, (stack.agent, b)[i % 2], (b, stack.agent)[i % 2], http, books,
                      random.Random(rng.random())) for i in range(args.users)]
        # Baseline in the same run: time to first token of one user on the idle system.
        probe = RawChat(stack.agent.url, stack.token("soak-probe", ROLES), http)
        idle = [(await probe.submit("привет", None, None, timeout=60)).first_token_s
                for _ in range(5)]
        idle_ttft = [t for t in idle if t is not None]
        memory = {"start": rss(procs)}
        size0 = db_size(stack.database_url)
        started = time.monotonic()
        stop_at = started + args.seconds
        loops = [asyncio.create_task(user_loop(u, stop_at, random.Random(rng.random()),
                                               (args.think_min, args.think_max)))
                 for u in users]
        samples: list[dict[str, float]] = []
        for i in range(10):  # ten samples across the run, for the trend
            await asyncio.sleep(args.seconds / 10)
            samples.append({"t_s": round(time.monotonic() - started), "actions": books.actions,
                            **rss(procs)})
            if i == 4:
                memory["middle"] = rss(procs)
        # Running actions finish; a hard bound so the soak always stops by itself.
        _done, pending = await asyncio.wait(loops, timeout=args.grace)
        for t in pending:
            t.cancel()
        elapsed = time.monotonic() - started
        await asyncio.sleep(args.drain)  # dropped connections' turns run to their end
        memory["end"] = rss(procs)
    result = check_books(stack, books)
    growth = db_size(stack.database_url) - size0
    return {
        "bench": "soak", "seconds": args.seconds, "elapsed_s": round(elapsed, 1),
        "users": args.users, "replicas": 2, "actions": books.actions,
        "unfinished_users_cancelled": len(pending),
        **result,
        "outcomes": dict(sorted(books.outcomes.items())),
        "history_reads": books.history_reads, "history_errors": books.history_errors,
        "ttft_ms": {"p50": pct(books.first_token_s, 0.5), "p99": pct(books.first_token_s, 0.99),
                    "n": len(books.first_token_s), "idle_baseline_p50": pct(idle_ttft, 0.5)},
        # Any two events (includes a tool's own run time) and two text events in a row.
        "event_gap_ms": {"p50": pct(books.gaps_s, 0.5), "p99": pct(books.gaps_s, 0.99),
                         "n": len(books.gaps_s)},
        "token_gap_ms": {"p50": pct(books.token_gaps_s, 0.5),
                         "p99": pct(books.token_gaps_s, 0.99), "n": len(books.token_gaps_s)},
        "rss_mb": memory,
        # MB per 1000 actions over the second half (start-up warm-up excluded): ~0 = flat.
        "rss_trend_mb_per_1k_actions": trend(samples[4:], ["agent_a", "agent_b"]),
        "rss_samples": samples,
        "db_growth_bytes_per_turn": round(growth / max(1, result["turns_stored"])),
        "baseline_note": "goal: turns_lost 0, confirmed_not_executed_once 0, flat rss",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--think-min", type=float, default=4.0)
    ap.add_argument("--think-max", type=float, default=16.0)
    ap.add_argument("--grace", type=float, default=120.0, help="bound for running actions")
    ap.add_argument("--drain", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    args.users = min(args.users, 500)  # bounded in count as well as in time
    tmp = Path(tempfile.mkdtemp(prefix="agentchat-soak-"))
    server = os.environ.get("TEST_DATABASE_URL") or embedded_url(tmp / "pg")
    url = create_database(server)
    env = {"AGENTCHAT_AGENT_PLANNER_TOKEN_DELAY_S": "0.033",  # a 30 tokens/s model
           "AGENTCHAT_AGENT_LEASE_S": "10", "AGENTCHAT_AGENT_POLICY_TIMEOUT_S": "2.0"}
    try:
        with running_stack(tmp / "data", url, **env) as stack:
            b, policy_b = start_replica(stack, **env)
            try:
                result = asyncio.run(soak(stack, b, policy_b, args))
            finally:
                policy_b.stop()
            print(json.dumps(result, ensure_ascii=False))
    finally:
        drop_database(server, url)


if __name__ == "__main__":
    main()
