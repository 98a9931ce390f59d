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

Faults mode (`--faults`, or `SOAK_FAULTS=1`; `make soak SOAK_FAULTS=1`): the database is a
private PostgreSQL server the soak starts (tests/testkit/private_pg.py), never the shared one,
and during the run one agent replica is killed with SIGKILL and restarted every 60 s (the two
in turn), the first replica's policy sidecar is restarted, and PostgreSQL is restarted once.
Every tab sends a `tab_id`, so its lease survives a reconnect. A client whose stream ends
before its last event (a dropped connection, a killed replica, a `drop` action) rejoins the run
on a live replica (`action: "join"` with its `run_id` and last `seq`); a turn that ends with a
retryable error (`RUN_LOST`, `STORAGE_UNAVAILABLE`, …) is retried (`action: "retry"`) until it
completes (bounded); a message refused before its run started (`run_id: null`) is sent again.
The books add: turns that never completed (`turns_lost` counts them), every rejoined stream's
final text against the stored message, `seq` continuity across rejoins, runs and turns left
`running`, and per fault what the clients saw (drops, rejoins and how they ended, error codes,
retries, time from the drop to the rejoined stream's first event). A killed replica's runs are
taken over by the other (docs/protocol.md §4 "Takeover"): a rejoin then gets
`run_resumed` and its seq goes on from `after_seq`; the goal `runs_lost_0` says no run was
lost (`RUN_LOST`) while a replica lived to take it, and `runs_taken_over` counts takeovers.

Only 127.0.0.1 is contacted. Run: `make soak SOAK_SECONDS=600` or
`python bench/soak.py --seconds 120 --users 200 [--faults]`. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

from agentchat.db import embedded_url
from agentchat.sandbox.data import seed_dashboards
from testkit.private_pg import PrivatePostgres
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
TERMINAL = ("final", "confirm_required", "error")
FAULT_WINDOW_S = 45.0  # what a client sees this long after a fault starts is that fault's
RECOVERY_BOUND_S = 120.0  # a turn not completed this long after its first submit is lost


def terminal(out: Outcome) -> bool:
    return bool(out.events) and out.kind in TERMINAL


@dataclass
class Fault:
    name: str
    at_s: float
    took_s: float | None = None  # down → back up
    error: str | None = None
    saw: Counter[str] = field(default_factory=Counter)
    rejoin_first_event_ms: list[float] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        ms = sorted(self.rejoin_first_event_ms)
        return {"fault": self.name, "at_s": round(self.at_s, 1),
                "recovered_in_s": None if self.took_s is None else round(self.took_s, 1),
                **({"error": self.error} if self.error else {}),
                "clients_saw": dict(sorted(self.saw.items())),
                "drop_to_rejoined_first_event_ms": {
                    "n": len(ms), "p50": round(ms[len(ms) // 2], 1) if ms else None,
                    "max": round(ms[-1], 1) if ms else None}}


class FaultLog:
    """The faults injected so far; what a client sees is filed under the latest fault that
    started within FAULT_WINDOW_S, else under `no_fault`."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.faults: list[Fault] = []
        self.no_fault: Counter[str] = Counter()

    def now_s(self) -> float:
        return time.monotonic() - self.started

    def begin(self, name: str) -> Fault:
        fault = Fault(name, self.now_s())
        self.faults.append(fault)
        return fault

    def current(self) -> Fault | None:
        now = self.now_s()
        for fault in reversed(self.faults):
            if fault.at_s <= now <= fault.at_s + FAULT_WINDOW_S:
                return fault
        return None

    def saw(self, what: str, rejoin_ms: float | None = None) -> None:
        fault = self.current()
        if fault is None:
            self.no_fault[what] += 1
            return
        fault.saw[what] += 1
        if rejoin_ms is not None:
            fault.rejoin_first_event_ms.append(rejoin_ms)


class Replicas:
    """The agent replicas by index; one being restarted is down until it answers again."""

    def __init__(self, agents: list[Service]) -> None:
        self.agents = agents
        self.down: set[int] = set()

    def index(self, svc: Service) -> int:
        return self.agents.index(svc)

    async def live(self, prefer: Service) -> Service:
        i = self.index(prefer)
        for _ in range(600):
            for j in (i, 1 - i):
                if j not in self.down:
                    return self.agents[j]
            await asyncio.sleep(0.1)
        return prefer


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
    # faults mode
    turns: Counter[str] = field(default_factory=Counter)          # logical turn -> how it ended
    rejoined: dict[str, str] = field(default_factory=dict)        # message_id -> joined text
    rejoins: Counter[str] = field(default_factory=Counter)
    seq_breaks: list[dict[str, Any]] = field(default_factory=list)
    lost_examples: list[dict[str, Any]] = field(default_factory=list)
    client_errors: Counter[str] = field(default_factory=Counter)
    lost_reasons: Counter[str] = field(default_factory=Counter)

    def note(self, out: Outcome) -> None:
        """Finals and card answers in any stream (a submit's, a join's, a retry's)."""
        cid = out.conversation_id
        for e in out.events:
            meta = e["metadata"]
            if meta.get("message_id") and cid:
                self.finals[str(meta["message_id"])] = cid
            if meta.get("type") == "confirm_resolved":
                (self.confirmed if meta["result"] == "confirmed" else self.denied).add(
                    str(meta["confirm_id"]))

    def record(self, kind: str, out: Outcome, new_turn: bool) -> None:
        self.actions += 1
        label = out.kind if out.kind != "error" else f"error:{out.last.get('code')}"
        self.outcomes[f"{kind}->{label}"] += 1
        if out.first_token_s is not None:
            self.first_token_s.append(out.first_token_s)
        self.gaps_s.extend(out.gaps_s)
        self.token_gaps_s.extend(out.token_gaps_s)
        self.note(out)
        cid = out.conversation_id
        # An admitted message: the first event is not a refusal (BUSY, INVALID_REQUEST, …).
        first = out.events[0]["metadata"] if out.events else {}
        if new_turn and cid and first and first.get("type") != "error":
            self.admitted[cid] += 1


def join_message(cid: str | None, run_id: str | None, last_seq: int) -> dict[str, Any]:
    return {"text": "", "files": [], "action": "join", "conversation_id": cid,
            "run_id": run_id, "last_seq": last_seq}


class User:
    def __init__(self, n: int, stack: Stack, home: Service, other: Service,
                 http: httpx.AsyncClient, books: Books, rng: random.Random,
                 replicas: Replicas | None = None, faults: FaultLog | None = None) -> None:
        self.n, self.home, self.other, self.http, self.books, self.rng = (
            n, home, other, http, books, rng)
        self.token = stack.token(f"soak-{n}", ROLES)
        self.tab = RawChat(home.url, self.token, http)
        self.chats = {home.url: self.tab}
        self.cid: str | None = None
        self.replicas, self.faults = replicas, faults
        self.tab_id = f"tab-{n}-{uuid.uuid4().hex[:8]}" if faults else None
        self.last_run: str | None = None  # the newest run this tab has seen

    def msg(self, text: str, **extra: Any) -> Any:
        """A message as the frontend sends it: with the tab's id in faults mode."""
        if self.tab_id is None and not extra:
            return text
        return {"text": text, "files": [], **extra,
                **({"tab_id": self.tab_id} if self.tab_id else {})}

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

    def chat(self, agent: Service) -> RawChat:
        """The tab's Gradio session on this replica (on another one: the same tab_id)."""
        if agent.url not in self.chats:
            self.chats[agent.url] = RawChat(agent.url, self.token, self.http)
        return self.chats[agent.url]

    async def submit(self, agent: Service, data: Any, action: str | None,
                     **kw: Any) -> Outcome:
        try:
            return await self.chat(agent).submit(data, action, self.cid, timeout=180, **kw)
        except ValueError as e:  # gradio_client's apply_diff on a value it did not expect
            self.books.client_errors[f"{type(e).__name__}: {e}"] += 1
            return Outcome(transport_error=type(e).__name__)

    async def say(self, kind: str, text: str, **kw: Any) -> Outcome:
        agent = await self.replicas.live(self.home) if self.replicas else self.home
        out = await self.submit(agent, self.msg(text), None, **kw)
        self.books.record(kind, out, new_turn=True)
        self.cid = out.conversation_id or self.cid
        if self.faults is not None:
            out = await self.see_through(kind, out, lambda a: self.submit(a, self.msg(text),
                                                                          None))
        return out

    async def card(self) -> None:
        dashboard = self.rng.choice(DASHBOARDS)
        out = await self.say("card", f"задеплой дашборд {dashboard} в ss-stage")
        if out.kind != "confirm_required":
            return
        await asyncio.sleep(self.rng.uniform(0.5, 8.0))  # the user reads the card
        action = "confirm" if self.rng.random() < 0.7 else "deny"
        data = self.msg("__resume__", confirm_id=out.last["confirm_id"])
        agent = await self.replicas.live(self.home) if self.replicas else self.home
        answer = await self.submit(agent, data, action)
        self.books.record(action, answer, new_turn=False)
        if self.faults is not None:
            await self.see_through(action, answer, lambda a: self.submit(a, data, action))

    async def cancel(self) -> None:
        """A long answer stopped shortly after it starts (the frontend's Stop)."""
        seen: dict[str, Outcome] = {}
        started = asyncio.Event()

        def on_event(out: Outcome) -> None:
            seen["out"] = out
            started.set()

        agent = await self.replicas.live(self.home) if self.replicas else self.home
        task = asyncio.create_task(self.submit(agent, self.msg("привет and echo 200 words"),
                                               None, on_event=on_event))
        cancelled = False
        try:
            await asyncio.wait_for(started.wait(), 60)
        except TimeoutError:
            pass
        else:
            await asyncio.sleep(self.rng.uniform(0.2, 1.5))
            if not task.done():
                with contextlib.suppress(httpx.HTTPError):
                    await self.chat(agent).cancel(seen["out"])
                    cancelled = True
        out = await task
        self.books.record("cancel", out, new_turn=True)
        self.cid = out.conversation_id or self.cid
        if self.faults is not None:
            if cancelled and not out.transport_error:
                self.remember(out)
                self.books.turns["cancelled"] += 1
            else:
                await self.see_through("cancel", out, None)

    async def read_history(self) -> None:
        self.books.history_reads += 1
        other = await self.replicas.live(self.other) if self.replicas else self.other
        try:
            resp = await self.http.get(other.url + "/api/assistant/history", timeout=60,
                                       params={"conversation_id": self.cid, "limit": 50},
                                       headers={"Authorization": f"Bearer {self.token}"})
            if resp.status_code != 200:
                self.books.history_errors += 1
        except httpx.HTTPError:
            self.books.history_errors += 1

    # -- faults mode: rejoin, retry, resend -----------------------------------------------------

    def remember(self, out: Outcome) -> None:
        if out.events and out.last.get("run_id"):
            self.last_run = str(out.last["run_id"])

    async def see_through(self, kind: str, out: Outcome,
                          resend: Callable[[Service], Awaitable[Outcome]] | None) -> Outcome:
        """Carry one logical turn to its end as a client that keeps going would: rejoin a
        stream that stopped early, retry a turn that ended with a retryable error, send a
        refused message again. Files how the turn ended in books.turns."""
        assert self.faults is not None and self.replicas is not None
        books, faults = self.books, self.faults
        deadline = time.monotonic() + RECOVERY_BOUND_S
        how = "completed"
        while True:
            if not terminal(out) and time.monotonic() < deadline:
                if out.events:
                    faults.saw(f"{kind}:stream_ended_early:{out.transport_error or 'closed'}")
                    out = await self.rejoin(out)
                    continue
                # Nothing arrived: the replica was down, or died before the first event.
                faults.saw(f"{kind}:no_event:{out.transport_error or 'closed'}")
                joined = await self.find_new_run()
                if joined is not None:
                    out = joined
                    continue
                if resend is None:
                    how = "cancelled_unseen"
                    break
                out = await self.resend(resend)
                how = "completed_after_resend"
                continue
            if not terminal(out):
                how = "lost"
                break
            self.remember(out)
            meta = out.last
            if out.kind != "error":
                break
            code = str(meta.get("code"))
            if not meta.get("retryable") or time.monotonic() >= deadline:
                how = "lost" if meta.get("retryable") else f"error:{code}"
                break
            if meta.get("run_id") is None or code == "CONVERSATION_BUSY":
                # Refused before a run started: nothing is stored; the user sends it again.
                faults.saw(f"{kind}:refused:{code}")
                if resend is None:
                    how = "cancelled_unseen"
                    break
                out = await self.resend(resend)
                how = "completed_after_resend"
                continue
            faults.saw(f"{kind}:turn_error:{code}")
            await asyncio.sleep(1.0)  # a client backs off before it retries
            out = await self.retry()
            how = "completed_after_retry"
        if how == "lost":
            books.lost_reasons[f"{kind}:" + (out.transport_error or "no_terminal"
                                             if not terminal(out) or out.kind != "error"
                                             else f"error:{out.last.get('code')}")] += 1
        if how == "lost" and len(books.lost_examples) < 10:
            books.lost_examples.append({"user": self.n, "kind": kind, "cid": self.cid,
                                        "types": out.types()[-5:], "last": out.last,
                                        "transport_error": out.transport_error})
        books.turns[how] += 1
        return out

    async def resend(self, send: Callable[[Service], Awaitable[Outcome]]) -> Outcome:
        """Send a message refused before its run started (nothing was stored) once more, after
        a client's back-off, on a live replica."""
        assert self.replicas is not None
        await asyncio.sleep(1.0)
        out = await send(await self.replicas.live(self.home))
        self.books.note(out)
        self.cid = out.conversation_id or self.cid
        return out

    async def retry(self) -> Outcome:
        """`action: "retry"` of the tab's last turn, on a live replica; BUSY while the dead
        replica's run is not yet marked lost (its heartbeat bound) is waited out."""
        assert self.faults is not None and self.replicas is not None
        for _ in range(60):
            agent = await self.replicas.live(self.home)
            out = await self.submit(agent, self.msg(""), "retry")
            self.books.note(out)
            if out.kind == "error" and out.last.get("code") in ("CONVERSATION_BUSY",
                                                                "STORAGE_UNAVAILABLE",
                                                                "AGENT_SATURATED") \
                    and out.last.get("run_id") is None:
                self.faults.saw(f"retry:refused:{out.last.get('code')}")
                await asyncio.sleep(1.0)
                continue
            self.faults.saw("retry:" + (out.kind if out.kind != "error"
                                        else f"error:{out.last.get('code')}"))
            return out
        return out

    async def join(self, run_id: str | None, last_seq: int,
                   dropped_at: float) -> tuple[Outcome, float | None]:
        """One join on a live replica, the other one first (the survivor)."""
        assert self.replicas is not None
        agent = await self.replicas.live(self.other)
        chat = RawChat(agent.url, self.token, self.http)
        seen: list[float] = []

        def on_event(_out: Outcome) -> None:
            if not seen:
                seen.append(time.monotonic())

        out = await chat.submit(join_message(self.cid, run_id, last_seq), timeout=180,
                                on_event=on_event)
        return out, ((seen[0] - dropped_at) * 1000 if seen else None)

    async def rejoin(self, out: Outcome) -> Outcome:
        """Follow the run whose stream stopped early until its last event; the events seen
        and joined, as one Outcome. seq must go on from the last one seen."""
        assert self.faults is not None
        books, faults = self.books, self.faults
        merged = Outcome(events=list(out.events), event_id=out.event_id, started=out.started,
                         first_token_s=out.first_token_s)
        dropped_at = time.monotonic()
        run_id = str(out.last.get("run_id") or "") or None
        attempts = 0
        while not terminal(merged) and attempts < 30:
            attempts += 1
            last_seq = int(merged.last.get("seq", 0))
            joined, first_ms = await self.join(run_id, last_seq, dropped_at)
            books.rejoins["joins"] += 1
            if joined.events and joined.kind == "error" and joined.last.get("run_id") is None:
                code = str(joined.last.get("code"))
                faults.saw(f"join:refused:{code}")
                books.rejoins[f"refused:{code}"] += 1
                if code == "NO_RUN" and attempts >= 4:
                    # The run was never stored (its replica died before the first write):
                    # the turn is retried like a lost run.
                    merged.events.append({"role": "assistant", "content": "", "metadata": {
                        "type": "error", "code": "RUN_LOST", "retryable": True,
                        "run_id": run_id, "note": "join: NO_RUN"}})
                    break
                await asyncio.sleep(1.0)
                continue
            # A heartbeat repeats a seq (0 before the join's first event): not an event.
            joined.events = [e for e in joined.events
                             if e["metadata"].get("type") != "heartbeat"]
            if joined.events:
                seqs = [int(e["metadata"]["seq"]) for e in joined.events]
                lost_rewind = joined.kind == "error" and joined.last.get("code") == "RUN_LOST"
                want = list(range(last_seq + 1, last_seq + 1 + len(seqs)))
                # A takeover: served from `after_seq` (events the dead replica sent but never
                # stored are dropped), run_resumed first, contiguous from there.
                resumed = next((int(e["metadata"]["after_seq"]) for e in joined.events
                                if e["metadata"].get("type") == "run_resumed"), None)
                if resumed is not None and resumed < last_seq:
                    want = list(range(resumed + 1, resumed + 1 + len(seqs)))
                    books.rejoins["served_from_after_seq"] += 1
                if seqs != want and not (lost_rewind and len(seqs) == 1):
                    books.seq_breaks.append({"run_id": run_id, "after": last_seq,
                                             "got": seqs[:5]})
                faults.saw("join:first_event", first_ms)
                merged.events.extend(joined.events)
            if terminal(joined):
                books.rejoins[f"ended:{joined.kind if joined.kind != 'error' else joined.last.get('code')}"] += 1  # noqa: E501
                faults.saw(f"join:ended:{joined.kind if joined.kind != 'error' else joined.last.get('code')}")  # noqa: E501
                if joined.kind == "final":
                    books.rejoined[str(joined.last["message_id"])] = joined.events[-1][
                        "content"]
                books.note(joined)
                break
            faults.saw(f"join:dropped:{joined.transport_error or 'closed'}")
            await asyncio.sleep(0.5)
        merged.transport_error = None if terminal(merged) else "rejoin gave up"
        return merged

    async def find_new_run(self) -> Outcome | None:
        """A submit that saw no event may still have started a run: the conversation's
        newest run, if it is not one this tab has seen, is this submit's."""
        if self.cid is None:
            return None
        joined, _ = await self.join(None, 0, time.monotonic())
        rid = joined.last.get("run_id") if joined.events else None
        if not rid or rid == self.last_run:
            return None
        self.faults.saw("join:found_unseen_run")  # type: ignore[union-attr]
        self.books.rejoins["found_unseen_run"] += 1
        if terminal(joined) and joined.kind == "final":
            self.books.rejoined[str(joined.last["message_id"])] = joined.events[-1]["content"]
        self.books.note(joined)
        return joined if joined.events else None


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


def left_running(url: str) -> tuple[int, int]:
    """Turns and runs still `running`."""
    with psycopg.connect(url, connect_timeout=5) as conn:
        turns = conn.execute("SELECT count(*) FROM turns WHERE status='running'").fetchone()
        runs = conn.execute("SELECT count(*) FROM runs WHERE status='running'").fetchone()
    return (int(turns[0]) if turns else 0), (int(runs[0]) if runs else 0)


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
        runs_running = conn.execute("SELECT count(*) FROM runs WHERE status='running'"
                                    ).fetchone()
        runs_lost = conn.execute("SELECT count(*) FROM runs WHERE status='lost'").fetchone()
        taken_over = conn.execute("SELECT count(*), count(*) FILTER (WHERE status='completed')"
                                  " FROM runs WHERE attempt > 1").fetchone()
        statuses = dict(conn.execute(
            "SELECT coalesce(error_code, status), count(*) FROM turns GROUP BY 1").fetchall())
        run_statuses = dict(conn.execute(
            "SELECT kind || ':' || status, count(*) FROM runs GROUP BY 1").fetchall())
        dangling = conn.execute("SELECT count(*) FROM tool_calls WHERE outcome='running'"
                                ).fetchone()
        n_turns = conn.execute("SELECT count(*) FROM turns").fetchone()
        texts = dict(conn.execute("SELECT id, content FROM messages WHERE id = ANY(%s)",
                                  (list(books.rejoined),)).fetchall())
    missing_finals = len(set(books.finals) - stored)
    missing_users = sum(max(0, n - int(users.get(cid, 0))) for cid, n in books.admitted.items())
    still_running = int(running[0]) if running else 0
    mismatched = [m for m, text in books.rejoined.items() if texts.get(m) != text]
    audit = stack.audit()
    # An execution is a request that reached the operation (a replay of the key is not).
    executions = Counter(a["idempotency_key"] for a in audit
                         if a["operation"] == "deploy_dashboard" and a["outcome"] != "replayed")
    ok = Counter(a["idempotency_key"] for a in audit
                 if a["operation"] == "deploy_dashboard" and a["outcome"] == "ok")
    bad = [k for k in books.confirmed if executions[k] != 1]
    return {
        "turns_lost": missing_finals + missing_users + still_running + books.turns["lost"],
        "lost_detail": {"finals_not_stored": missing_finals,
                        "messages_not_stored": missing_users, "turns_left_running": still_running,
                        "runs_left_running": int(runs_running[0]) if runs_running else 0,
                        "turns_not_completed_by_the_client": books.turns["lost"],
                        "tool_calls_left_running": int(dangling[0]) if dangling else 0},
        "runs_lost": int(runs_lost[0]) if runs_lost else 0,
        "runs_taken_over": int(taken_over[0]) if taken_over else 0,
        "runs_taken_over_completed": int(taken_over[1]) if taken_over else 0,
        "confirmed": len(books.confirmed),
        "confirmed_not_executed_once": len(bad),
        "confirmed_not_executed_once_keys": bad[:5],
        "confirmed_not_executed_once_why": why_not_once(url, audit, bad[:5]),
        "confirmed_executed_ok": sum(1 for k in books.confirmed if ok[k] == 1),
        "denied_but_executed": sum(1 for k in books.denied if executions[k]),
        "rejoined_finals": len(books.rejoined),
        "rejoined_text_not_equal_stored": len(mismatched),
        "rejoined_text_mismatch_ids": mismatched[:5],
        "turns_stored": int(n_turns[0]) if n_turns else 0,
        "turns_by_status_or_code": statuses,
        "runs_by_kind_and_status": run_statuses,
    }


def why_not_once(url: str, audit: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    """What each side recorded for a confirmed card whose call did not run exactly once: the
    sandbox's audit rows for its key, and the agent's card, call, turn and run."""
    if not keys:
        return {}
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.confirm_id, c.status, tc.outcome, tc.error, tc.attempts, t.status,"
            " t.error_code, r.kind, r.status, r.attempt"
            " FROM confirmations c"
            " LEFT JOIN tool_calls tc ON tc.conversation_id = c.conversation_id"
            "  AND tc.call_id = c.call_id"
            " LEFT JOIN turns t ON t.id = c.turn_id"
            " LEFT JOIN LATERAL (SELECT kind, status, attempt FROM runs"
            "  WHERE runs.conversation_id = c.conversation_id ORDER BY started_at DESC LIMIT 1)"
            "  r ON true WHERE c.confirm_id = ANY(%s)", (keys,)).fetchall()
    agent = {r[0]: {"card": r[1], "call": r[2], "call_error": r[3], "attempts": r[4],
                    "turn": r[5], "turn_error": r[6], "last_run": f"{r[7]}:{r[8]}",
                    "run_attempt": r[9]} for r in rows}
    return {k: {"sandbox": [a["outcome"] for a in audit if a["idempotency_key"] == k],
                "agent": agent.get(k)} for k in keys}


def fault_schedule(seconds: float) -> list[tuple[float, str, int]]:
    """(at_s, what, replica): a replica killed every 60 s from 30 s (the two in turn), the
    sidecar restarted and PostgreSQL restarted once, each half-way between two kills."""
    plan: list[tuple[float, str, int]] = []
    at, k = 30.0, 0
    while at <= seconds - 10:
        plan.append((at, "kill", 1 - k % 2))
        at += 60
        k += 1
    plan.append((min(60.0, seconds * 0.4), "policy", 0))
    plan.append((max(min(60.0 * round(0.75 * seconds / 60), seconds - 15), seconds * 0.6),
                 "postgres", 0))
    return sorted(plan)


async def inject_faults(plan: list[tuple[float, str, int]], replicas: Replicas,
                        policy: Service, pg: PrivatePostgres, faults: FaultLog) -> None:
    names = ["agent_a", "agent_b"]
    for at, what, i in plan:
        await asyncio.sleep(max(0.0, faults.started + at - time.monotonic()))
        name = {"kill": f"SIGKILL {names[i]}, restarted", "policy": "policy_a restarted",
                "postgres": "PostgreSQL restarted"}[what]
        fault = faults.begin(name)
        t0 = time.monotonic()
        try:
            if what == "kill":
                svc = replicas.agents[i]
                replicas.down.add(i)
                await asyncio.to_thread(svc.stop, signal.SIGKILL)
                await asyncio.to_thread(svc.start, 120)
                replicas.down.discard(i)
            elif what == "policy":
                await asyncio.to_thread(policy.stop)
                await asyncio.to_thread(policy.start, 60)
            else:
                await asyncio.to_thread(pg.restart)
        except Exception as e:  # reported, and the soak goes on
            fault.error = f"{type(e).__name__}: {str(e)[:300]}"
        fault.took_s = time.monotonic() - t0


async def soak(stack: Stack, b: Service, policy_b: Service,
               args: argparse.Namespace, pg: PrivatePostgres | None = None) -> dict[str, Any]:
    rng = random.Random(args.seed)
    books = Books()
    assert stack.policy is not None and stack.sandbox is not None
    procs = {"agent_a": stack.agent, "agent_b": b, "sandbox": stack.sandbox,
             "policy_a": stack.policy, "policy_b": policy_b}
    faults = FaultLog() if args.faults else None
    replicas = Replicas([stack.agent, b]) if args.faults else None
    limits = httpx.Limits(max_connections=args.users * 3, max_keepalive_connections=args.users)
    async with httpx.AsyncClient(limits=limits) as http:
        users = [User(i, stack, (stack.agent, b)[i % 2], (b, stack.agent)[i % 2], http, books,
                      random.Random(rng.random()), replicas, faults) for i in range(args.users)]
        # Baseline in the same run: time to first token of one user on the idle system.
        probe = RawChat(stack.agent.url, stack.token("soak-probe", ROLES), http)
        idle = [(await probe.submit("привет", None, None, timeout=60)).first_token_s
                for _ in range(5)]
        idle_ttft = [t for t in idle if t is not None]
        memory = {"start": rss(procs)}
        size0 = db_size(stack.database_url)
        started = time.monotonic()
        stop_at = started + args.seconds
        injector = None
        if faults is not None and replicas is not None and pg is not None:
            faults.started = started
            injector = asyncio.create_task(inject_faults(fault_schedule(args.seconds),
                                                         replicas, stack.policy, pg, faults))
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
        if injector is not None:
            await injector
        elapsed = time.monotonic() - started
        await asyncio.sleep(args.drain)  # dropped connections' turns run to their end
        settle_s = None
        if faults is not None:
            # A dead replica's run nobody joined is marked lost by the sweeper (heartbeat
            # bound + its interval): wait for that, bounded; what is left is stuck.
            t0 = time.monotonic()
            for _ in range(60):
                if not any(left_running(stack.database_url)):
                    break
                await asyncio.sleep(1.0)
            settle_s = round(time.monotonic() - t0, 1)
        memory["end"] = rss(procs)
    result = check_books(stack, books)
    growth = db_size(stack.database_url) - size0
    out: dict[str, Any] = {
        "bench": "soak", "faults_mode": bool(args.faults), "seconds": args.seconds,
        "elapsed_s": round(elapsed, 1),
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
    if faults is not None:
        out["faults"] = [f.report() for f in faults.faults]
        out["clients_saw_outside_fault_windows"] = dict(sorted(faults.no_fault.items()))
        out["turns_by_how_they_ended"] = dict(sorted(books.turns.items()))
        out["rejoins"] = dict(sorted(books.rejoins.items()))
        out["client_parse_errors"] = dict(books.client_errors)
        out["rejoin_seq_breaks"] = len(books.seq_breaks)
        out["rejoin_seq_break_examples"] = books.seq_breaks[:5]
        out["turns_lost_by_last_state"] = dict(sorted(books.lost_reasons.items()))
        out["lost_examples"] = books.lost_examples[:5]
        out["left_running_settled_in_s"] = settle_s
        out["goals"] = {
            "turns_lost_0": result["turns_lost"] == 0,
            "confirmed_not_executed_once_0": result["confirmed_not_executed_once"] == 0,
            "rejoined_text_equals_stored": result["rejoined_text_not_equal_stored"] == 0
            and not books.seq_breaks,
            # Each kill leaves the other replica alive: a dead replica's run is taken over.
            "runs_lost_0": result["runs_lost"] == 0,
            "no_stuck_running": result["lost_detail"]["turns_left_running"] == 0
            and result["lost_detail"]["runs_left_running"] == 0,
        }
        out["baseline_note"] = ("goals: turns_lost 0 (completed, or a retryable error whose "
                                "retry completed), confirmed_not_executed_once 0, rejoined "
                                "text = stored final, nothing left running")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--think-min", type=float, default=4.0)
    ap.add_argument("--think-max", type=float, default=16.0)
    ap.add_argument("--grace", type=float, default=120.0, help="bound for running actions")
    ap.add_argument("--drain", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--faults", action="store_true",
                    default=os.environ.get("SOAK_FAULTS", "") not in ("", "0", "false"),
                    help="kill/restart replicas, the sidecar and a private PostgreSQL")
    ap.add_argument("--keep", action="store_true",
                    help="keep the database (and the logs under the temp dir) to look into")
    args = ap.parse_args()
    args.users = min(args.users, 500)  # bounded in count as well as in time
    tmp = Path(tempfile.mkdtemp(prefix="agentchat-soak-"))
    pg = None
    if args.faults:  # a server of our own, so it may be restarted: never the shared one
        (tmp / "private-pg").mkdir()
        pg = PrivatePostgres(tmp / "private-pg")
        server = pg.url
    else:
        server = os.environ.get("TEST_DATABASE_URL") or embedded_url(tmp / "pg")
    url = create_database(server)
    env = {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.033",  # a 30 tokens/s model
           # The lease above RUN_LOST_S (10 s): a killed replica's runs are taken over before
           # the orphan sweep settles their turns (docs/reliability.md, "Takeover: a run
           # survives its replica"). A shorter RUN_LOST_S on this overloaded 2-core box
           # took live runs from starved replicas.
           "AGENTCHAT_AGENT_TUNING__LEASE_S": "20",
           "AGENTCHAT_AGENT_TUNING__POLICY_TIMEOUT_S": "2.0"}
    try:
        with running_stack(tmp / "data", url, **env) as stack:
            b, policy_b = start_replica(stack, **env)
            try:
                result = asyncio.run(soak(stack, b, policy_b, args, pg))
            finally:
                policy_b.stop()
            print(json.dumps(result, ensure_ascii=False))
    finally:
        if args.keep:
            print(f"kept: {url} (logs under {tmp})", file=sys.stderr)
        else:
            with contextlib.suppress(Exception):
                drop_database(server, url)
        if pg is not None:
            with contextlib.suppress(Exception):
                pg.stop()


if __name__ == "__main__":
    main()
