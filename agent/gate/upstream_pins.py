"""Pinned upstream tools, watched: a catalog tool of another team's MCP server runs only while
the server serves the definition its `pin` names (agentchat/catalog_upstreams.py), so a
definition changed after review (a rug pull, a poisoned description) or gone stops the tool on
every replica at once.

    refresh     every upstream of the catalog read whole (each environment's URL, every
                page: agent/gate/upstream_served.py) at start, on the catalog's new revision,
                on a server's `notifications/tools/list_changed` where its session can carry
                one, and every `refresh_s`; each catalog tool compared with its pin
    quarantine  a tool whose served definition fails its pin in any environment is recorded
                in PostgreSQL (agent/storage/quarantine.py: server, tool, pin, the evidence);
                a pass that reads every environment and finds it pinned again lifts it. An
                unreachable environment changes nothing (its calls fail on their own) and
                counts as a failed refresh
    allows      the call path asks right before sending: one read by primary key, so a
                quarantine one replica found holds on all of them at their next call
    offered     what the model and MCP `tools/list` are offered: this replica's copy of the
                table, read again every `poll_s` (and after each pass)

Only catalog entries are tools: a tool the server adds is never offered by itself. A call of
a quarantined tool, refused at its check (agent/gate/checks.py) or right before sending
(agent/gate/upstream_calls.py), is `tool_error` with reason `tool_definition_changed`
(docs/protocol.md §2).
Metrics: `agentchat_upstream_tool_quarantined{server, tool}`, `agentchat_upstream_tools{server}`,
`agentchat_upstream_refresh_failures_total{server}`,
`agentchat_upstream_refresh_timestamp_seconds{server}` (the chart's alerts read them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from agentchat.agent.gate.upstream_served import (
    Drift,
    Opener,
    Unreachable,
    drifts,
    list_served,
    upstream_tools,
    watch_changes,
)
from agentchat.agent.metrics import (
    UPSTREAM_QUARANTINED,
    UPSTREAM_REFRESH_FAILURES,
    UPSTREAM_REFRESHED,
    UPSTREAM_TOOLS,
)
from agentchat.agent.storage import quarantine as records
from agentchat.agent.storage.db import Db
from agentchat.catalog import Catalog, Tool
from agentchat.catalog_source import CatalogSource

log = logging.getLogger("agentchat.agent.gate.upstream_pins")

DEFINITION_CHANGED = "tool_definition_changed"  # a refused call's reason (docs/protocol.md §2)
CHANGED_TEXT = ("not run: the server's definition of this tool no longer matches the one "
                "reviewed (its pin); the tool is quarantined until it does")
Key = records.Key


def key_of(tool: Tool) -> Key | None:
    ref = tool.upstream
    return None if ref is None else (ref.server, ref.tool, ref.pin)


class UpstreamPins:
    def __init__(self, *, pool: Db, catalogs: CatalogSource, opener: Opener,
                 refresh_s: float, poll_s: float = 1.0) -> None:
        self.pool = pool
        self.catalogs = catalogs
        self.opener = opener
        self.refresh_s = refresh_s
        # How stale this replica's copy of the table may be for `offered` (a call is
        # checked in the table itself): one indexed read a second, only with upstream tools.
        self.poll_s = min(poll_s, refresh_s)
        self._held: frozenset[Key] = frozenset()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._watchers: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._revision: str | None = None
        self._exported: set[tuple[str, str]] = set()

    # -- what callers ask ---------------------------------------------------------------

    def offered(self, tool: Tool) -> bool:
        """May the tool be offered (to the model, in MCP tools/list)? Not while quarantined,
        as this replica last read the table."""
        key = key_of(tool)
        return key is None or key not in self._held

    async def allows(self, tool: Tool) -> bool:
        """May a call of the tool be sent now? Asked of the table right before sending."""
        key = key_of(tool)
        return key is None or not await records.held(self.pool, key)

    # -- one pass -----------------------------------------------------------------------

    async def refresh(self) -> list[Drift]:
        """Every upstream of the current catalog read and compared; the table and this
        replica's copy brought up to date. Returns the drifts found."""
        catalog = self.catalogs.current()
        by_server = upstream_tools(catalog)
        found = await asyncio.gather(*(self._refresh_server(catalog, server, tools)
                                       for server, tools in by_server.items()))
        await self.reload()
        return [d for ds in found for d in ds]

    async def _refresh_server(self, catalog: Catalog, server: str,
                              tools: list[Tool]) -> list[Drift]:
        upstream = catalog.upstreams[server]
        envs = sorted(upstream.url)
        # The database's clock when the reads start: a lift never removes evidence another
        # replica recorded after this pass began reading (it may have seen the change first).
        started = await records.db_now(self.pool)
        lists = await asyncio.gather(*(list_served(self.opener, server, env, upstream.timeout_s)
                                       for env in envs), return_exceptions=True)
        found: list[Drift] = []
        unreadable = 0
        for env, served in zip(envs, lists, strict=True):
            if isinstance(served, Unreachable):
                unreadable += 1
                UPSTREAM_REFRESH_FAILURES.labels(server).inc()
                log.warning("upstream %s (%s): tools/list unreadable: %s", server, env, served)
            elif isinstance(served, BaseException):
                raise served
            else:
                found += drifts(tools, env, served)
        for drift in {d.key: d for d in found}.values():  # one row per key: the first seen
            if await records.quarantine(self.pool, drift.key, drift.observed, drift.definition):
                log.error("upstream tool %s quarantined: %s serves %s in %s, pinned %s",
                          drift.name, server, drift.observed or "nothing by that name",
                          drift.env, drift.pin)
        if not unreadable:
            UPSTREAM_REFRESHED.labels(server).set(time.time())
            drifted = {d.key for d in found}
            pinned = [k for t in tools if (k := key_of(t)) is not None and k not in drifted]
            for k in await records.lift(self.pool, pinned, before=started):
                log.warning("upstream tool %s/%s served as pinned again: quarantine lifted",
                            k[0], k[1])
        return found

    async def reload(self) -> None:
        """This replica's copy of the table, and the gauges from it."""
        catalog = self.catalogs.current()
        by_server = upstream_tools(catalog)
        self._held = await records.held_keys(self.pool) if by_server else frozenset()
        exported = set()
        for server, tools in by_server.items():
            UPSTREAM_TOOLS.labels(server).set(len(tools))
            for t in tools:
                UPSTREAM_QUARANTINED.labels(server, t.name).set(0 if self.offered(t) else 1)
                exported.add((server, t.name))
        for server, name in self._exported - exported:  # gone from the catalog
            with contextlib.suppress(KeyError):
                UPSTREAM_QUARANTINED.remove(server, name)
        for server in {s for s, _ in self._exported} - set(by_server):
            for gauge in (UPSTREAM_TOOLS, UPSTREAM_REFRESHED):
                with contextlib.suppress(KeyError):
                    gauge.remove(server)
        self._exported = exported

    # -- in the background --------------------------------------------------------------

    def start(self) -> None:
        """The first pass at once, then the timer, the table's poll and the watchers."""
        self._stop = asyncio.Event()
        self._wake.set()
        self._tasks = [asyncio.create_task(self._passes(), name="upstream-pins"),
                       asyncio.create_task(self._polls(), name="upstream-pins-poll")]

    async def aclose(self) -> None:
        self._stop.set()
        self._wake.set()  # the timer's wait ends now
        tasks = [*self._tasks, *self._watchers.values()]
        for task in self._watchers.values():
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks, self._watchers = [], {}

    async def _passes(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.refresh_s)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                await self.refresh()
            except Exception:  # the database, a bug: the next pass tries again
                log.exception("upstream tools' refresh failed")

    async def _polls(self) -> None:
        while not self._stop.is_set():
            catalog = self.catalogs.current()
            if catalog.revision != self._revision:
                # New pins are checked at once; the watchers follow the new URLs.
                self._revision = catalog.revision
                self._wake.set()
                self._watch(catalog)
            try:
                await self.reload()
            except Exception:
                log.exception("reading the upstream quarantine failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.poll_s)

    def _watch(self, catalog: Catalog) -> None:
        """One watcher per (server, environment, URL) of the catalog's upstream tools."""
        wanted = {(server, env, catalog.upstreams[server].url[env])
                  for server in upstream_tools(catalog) for env in catalog.upstreams[server].url}
        for gone in set(self._watchers) - wanted:
            self._watchers.pop(gone).cancel()
        for key in wanted - set(self._watchers):
            self._watchers[key] = asyncio.create_task(self._watch_one(key[0], key[1]),
                                                      name=f"upstream-watch-{key[0]}-{key[1]}")

    async def _watch_one(self, server: str, env: str) -> None:
        """Refresh at each list_changed the server sends; a session that cannot carry them
        ends the watch (the timer still refreshes), a dropped one is opened again later."""
        async def changed() -> None:
            log.info("upstream %s (%s) says its tools changed", server, env)
            self._wake.set()

        while not self._stop.is_set():
            try:
                if not await watch_changes(self.opener, server, env, changed):
                    return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("upstream %s (%s): no change stream (%s)", server, env,
                         type(e).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.refresh_s)
