"""Everything the agent needs at run time, built once at start and closed at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass

import httpx
from psycopg_pool import AsyncConnectionPool

from agentchat.agent.audit.retention import Retention
from agentchat.agent.audit.trail import AuditTrail
from agentchat.agent.chat.approvals import Approvals
from agentchat.agent.chat.audit_log import AuditLog
from agentchat.agent.chat.card_answers import CardAnswers
from agentchat.agent.chat.conversations import Conversations
from agentchat.agent.chat.facade import Chat
from agentchat.agent.chat.gated_calls import GatedCalls
from agentchat.agent.chat.gated_cards import STATE_INFO, StateSeal
from agentchat.agent.chat.join import RunListener
from agentchat.agent.chat.notify import Notifications
from agentchat.agent.chat.run_hub import RunHub
from agentchat.agent.chat.sweeper import CallRetention, Sweeper
from agentchat.agent.chat.takeover import Takeover
from agentchat.agent.chat.turn_starts import TurnStarts
from agentchat.agent.chat.turn_task import TurnRunner
from agentchat.agent.chat.upload_book import UploadBook
from agentchat.agent.chat.user_limits import PerMinute, UserLimits
from agentchat.agent.gate.checks import Gate
from agentchat.agent.gate.execution import Execution
from agentchat.agent.gate.policy_client import PolicyClient
from agentchat.agent.gate.service_token import ServiceTokenProvider
from agentchat.agent.gate.tool_runtime import ToolRuntime
from agentchat.agent.gate.upstream_auth import UpstreamCredentials
from agentchat.agent.gate.upstream_calls import UpstreamCalls
from agentchat.agent.gate.upstream_client import UpstreamClients
from agentchat.agent.gate.upstream_pins import UpstreamPins
from agentchat.agent.graph.builder import build_graph
from agentchat.agent.graph.checkpoints import Checkpointer
from agentchat.agent.graph.model import LlmStatusProbe, make_llm
from agentchat.agent.graph.state import GraphDeps
from agentchat.agent.selection.turn_tools import TurnToolChooser
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import grants as grant_records
from agentchat.agent.storage.sealing import TokenSeal
from agentchat.catalog_source import CatalogSource
from agentchat.db import create_pool, migrate, resolve_database_url
from agentchat.http_clients import async_client
from agentchat.identity import DevUserIssuer, user_verifier
from agentchat.verified_tokens import CachedVerifier, Verifier

log = logging.getLogger("agentchat.agent")


@dataclass
class Services:
    settings: AgentSettings
    catalogs: CatalogSource  # the catalog file, reloaded when it changes
    pool: AsyncConnectionPool
    http: httpx.AsyncClient
    runner: TurnRunner
    chat: Chat  # the chat domain's door: submit, join, stop, conversations, audit_log
    verifier: Verifier  # the user token, cached once verified (verified_tokens.py)
    tokens: ServiceTokenProvider
    dev_issuer: DevUserIssuer | None
    hub: RunHub
    listener: RunListener
    # REST writes a minute per user (agent/api/deps.py `RestWriter`).
    rest_writes: PerMinute
    approvals: Approvals  # answers by someone else (docs/protocol.md §11), the inbox
    gated_calls: GatedCalls  # calls from MCP clients through the gate (agent/mcp/)
    uploads: UploadBook  # who owns each upload, and the quotas (agent/chat/upload_book.py)
    notifications: Notifications | None = None  # their outbox's delivery
    upstreams: UpstreamClients | None = None  # other teams' MCP servers (agent/gate/)
    pins: UpstreamPins | None = None  # their tools' pins, watched (agent/gate/upstream_pins.py)
    sweeper: Sweeper | None = None
    takeover: Takeover | None = None
    drain_started: float | None = None

    @property
    def draining(self) -> bool:
        return self.hub.draining

    def start_draining(self) -> None:
        """SIGTERM: take no new runs (AGENT_SATURATED; /readyz 503); live ones go on."""
        if not self.hub.draining:
            self.hub.draining = True
            self.drain_started = asyncio.get_event_loop().time()

    async def aclose(self) -> None:
        """Drain: live runs get `drain_s` to finish (uvicorn waited for their connections
        already), their events are stored, and the rest are released: another replica goes
        on with them at once (agent/chat/takeover.py)."""
        self.start_draining()
        await self.catalogs.aclose()
        if self.notifications is not None:
            await self.notifications.aclose()
        if self.sweeper is not None:
            await self.sweeper.aclose()
        if self.takeover is not None:
            await self.takeover.aclose()
        loop = asyncio.get_running_loop()
        spent = loop.time() - (self.drain_started or loop.time())
        await self.runner.drain(max(0.0, self.settings.drain_s - spent))
        deadline = loop.time() + 5.0
        while any(r.done for r in self.hub.live.values()) and loop.time() < deadline:
            with contextlib.suppress(Exception):
                await self.hub.flush()
            await asyncio.sleep(0.05)
        self.runner.abandoned = True  # the turns the loop cancels now record nothing
        await self.hub.abandon()
        await self.hub.aclose()
        await self.listener.aclose()
        if self.pins is not None:
            await self.pins.aclose()
        if self.upstreams is not None:
            await self.upstreams.aclose()
        await self.http.aclose()
        await self.gated_calls.gate.policy.aclose()
        await self.pool.close()


async def build_services(settings: AgentSettings, uploads: UploadBook) -> Services:
    """Everything the adapters call; `uploads` is the process's owners' book (ServiceHolder's),
    which the Gradio guard, built before the services, holds as well."""
    catalogs = CatalogSource(settings.catalog_path, check_s=settings.tuning.catalog_check_s)
    pool = create_pool(resolve_database_url(settings), max_size=settings.db_pool_max,
                       idle_in_transaction_s=(settings.db_idle_in_transaction_s
                                              or settings.tuning.run_lost_s))
    await pool.open(wait=True, timeout=30)
    async with pool.connection() as conn:
        await migrate(conn)
    # Half the pool: checkpoints never take every connection from our own statements.
    saver = Checkpointer(pool, settings.db_pool_max // 2)
    await saver.setup()
    # Shared by every user: it keeps no cookie (agentchat/http_clients.py).
    http = async_client(limits=httpx.Limits(max_connections=200,
                                            max_keepalive_connections=50))
    tokens = ServiceTokenProvider(settings, http)
    # Other teams' MCP servers, with our credential for each, never the user's token.
    upstreams = UpstreamClients(
        UpstreamCredentials(folder=settings.upstream_secrets, http=http, dev=settings.is_dev),
        max_result_bytes=settings.tuning.upstream_max_result_bytes)
    # Their tools run only while they serve the definitions the catalog pins.
    pins = UpstreamPins(pool=pool, catalogs=catalogs,
                        refresh_s=settings.tuning.upstream_refresh_s,
                        opener=lambda server, env: upstreams.open(catalogs.current(), server, env))
    audit = AuditTrail(db=pool, catalogs=catalogs,
                       session_key=settings.audit_session_key) if settings.audit else None
    # The sidecar over its own kept connections, not `http` (agent/gate/policy_wire.py).
    policy = PolicyClient(url=settings.policy_url, timeout_s=settings.tuning.policy_timeout_s,
                          tokens=tokens)
    deps = GraphDeps(
        catalogs=catalogs,
        llm=make_llm(settings),
        gate=Gate(policy, pins),
        execution=Execution(ToolRuntime(
            base_url=settings.sstools_url, tokens=tokens, http=http,
            max_output_chars=settings.tuning.max_tool_output_chars,
            upstream=UpstreamCalls(upstreams, pins=pins,
                                   max_result_bytes=settings.tuning.upstream_max_result_bytes,
                                   max_output_chars=settings.tuning.max_tool_output_chars))),
        audit=audit,
        grants=functools.partial(grant_records.covering, pool),
    )
    graph = build_graph(deps).compile(checkpointer=saver)
    runner = TurnRunner(graph=graph, pool=pool, lease_s=settings.tuning.lease_s, checkpointer=saver)
    # /chat and REST refuse a token minted for the MCP endpoint (agent/mcp/).
    verifier = CachedVerifier(user_verifier(settings, refused_audience=settings.mcp_resource),
                              ttl_s=settings.tuning.token_cache_s,
                              max_size=settings.tuning.token_cache_size)
    hub = RunHub(settings=settings, pool=pool)
    listener = RunListener(settings)
    selection = TurnToolChooser(settings, catalogs, offered=pins.offered)
    starts = TurnStarts(settings=settings, pool=pool, runner=runner, tools=selection,
                        replica=hub.replica, uploads=uploads)
    chat = Chat(settings=settings, pool=pool, runner=runner, hub=hub, listener=listener,
                limits=UserLimits.from_settings(settings), starts=starts,
                answers=CardAnswers(pool=pool, runner=runner, policy=policy,
                                    catalogs=catalogs, audit=audit),
                conversations=Conversations(pool=pool, catalogs=catalogs,
                                            run_lost_s=settings.tuning.run_lost_s,
                                            uploads=uploads),
                audit_log=AuditLog(pool=pool, audit_role=settings.audit_role),
                llm_status=LlmStatusProbe(settings, http), uploads=uploads)
    dev_issuer = DevUserIssuer(settings) if settings.is_dev else None
    sweeper = Sweeper(pool=pool, runner=runner, hub=hub, lease_s=settings.tuning.lease_s,
                            retention=Retention(db=pool, days=settings.audit_retention_days,
                                                interval_s=settings.tuning.audit_prune_interval_s),
                            uploads=uploads, upload_expiry_s=settings.tuning.upload_expiry_s,
                            calls=CallRetention(
                                db=pool, days=settings.tuning.mcp_calls_retention_days,
                                interval_s=settings.tuning.mcp_calls_prune_interval_s))
    sweeper.start()
    takeover = Takeover(settings=settings, pool=pool, hub=hub, starts=starts, audit=audit)
    takeover.start()
    catalogs.start()
    pins.start()
    notifications = Notifications(settings, pool, http, audit)
    notifications.start()
    approvals = Approvals(pool=pool, chat=chat, policy=policy, catalogs=catalogs, audit=audit)
    # The request states of MCP calls sealed under the run tokens' keys, their own purpose.
    states = StateSeal(TokenSeal.of(settings.resume_key, settings.resume_key_file,
                                    settings.service_client_secret, info=STATE_INFO))
    gated_calls = GatedCalls(pool=pool, gate=deps.gate, execution=deps.execution,
                             catalogs=catalogs, audit=audit, states=states,
                             public_url=settings.public_url,
                             confirmation_ttl_s=settings.confirmation_ttl_s,
                             pending_cap=settings.tuning.mcp_pending_calls_per_user,
                             tools_cache_s=settings.tuning.mcp_tools_cache_s,
                             tools_cache_size=settings.tuning.mcp_tools_cache_size)
    approvals.gated = gated_calls.on_approval
    return Services(settings=settings, catalogs=catalogs, pool=pool, http=http, runner=runner,
                    chat=chat, verifier=verifier, tokens=tokens, dev_issuer=dev_issuer,
                    hub=hub, listener=listener, uploads=uploads,
                    sweeper=sweeper, takeover=takeover,
                    rest_writes=PerMinute(settings.tuning.max_rest_writes_per_minute_per_user,
                                          "writes"),
                    approvals=approvals, gated_calls=gated_calls,
                    notifications=notifications, upstreams=upstreams, pins=pins)


class ServiceHolder:
    """Set in the app's lifespan; the Gradio functions (built earlier) read it per call. The
    owners' book of this process's uploads is built with it: the Gradio guard, added before the
    lifespan runs, and the services share it."""

    services: Services | None = None

    def __init__(self) -> None:
        self.uploads = UploadBook()

    def get(self) -> Services:
        if self.services is None:
            raise RuntimeError("the agent is not started")
        return self.services
