"""The agent's sub-commands: `agentchat serve` runs the service; `agentchat audit` exports,
verifies and prunes its audit trail; `agentchat mcp config` prints an MCP client's
configuration; `agentchat mcp pin | check` draft and check other teams' MCP servers' pinned
tools (agent/gate/upstream_review.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentchat.settings import SharedSettings

if TYPE_CHECKING:
    from agentchat.agent.gate.upstream_served import Opener
    from agentchat.catalog import Catalog


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from agentchat.agent.main import MountPathClash, create_app
    from agentchat.agent.settings import AgentSettings
    from agentchat.settings import refusals, report_unknown_env

    # A warning per AGENTCHAT_* variable nobody reads, before the settings may refuse.
    report_unknown_env(AgentSettings)
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    try:
        settings = AgentSettings(**overrides)
    except ValidationError as e:
        # One line per refusal, never the input (the environment holds secrets).
        reasons = refusals(AgentSettings, e.errors())
        print(f"agentchat serve: refusing to start: {reasons}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # httpx logs every outbound request at INFO with its URL (a search's words in the query):
    # ~4 % of the agent's CPU per MCP call (bench/mcp_gateway.py), and people's text in logs.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The MCP SDK's fork of it, the same for every request to an upstream MCP server (~5 a call).
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        app = create_app(settings)
    except MountPathClash as e:
        print(f"agentchat serve: refusing to start: {e}", file=sys.stderr)
        return 2
    holder = app.state.holder

    class DrainingServer(uvicorn.Server):
        """On SIGTERM the replica stops taking runs at once (AGENT_SATURATED, /readyz 503);
        uvicorn then waits up to `drain_s` for the live streams, and the app's shutdown marks
        what is left lost (agent/wiring.py)."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            if holder.services is not None:
                holder.services.start_draining()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                            timeout_graceful_shutdown=max(1, int(settings.drain_s)))
    DrainingServer(config).run()
    return 0


def _when(value: str) -> datetime:
    """An ISO 8601 time with its zone (a bare date is midnight UTC)."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from None
    if when.tzinfo is None:
        if "T" in value or " " in value:
            raise argparse.ArgumentTypeError(f"{value!r} needs a time zone (…Z or +00:00)")
        when = when.replace(tzinfo=UTC)
    return when


async def _audit_db(work: Callable[[Any], Awaitable[int]]) -> int:
    import psycopg

    from agentchat.db import CONNECTION_KWARGS, resolve_database_url

    url = resolve_database_url(SharedSettings())
    async with await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS) as conn:
        return await work(conn)


def _cmd_audit_export(args: argparse.Namespace) -> int:
    from agentchat.agent.audit.export import export_lines

    until = args.until or datetime.now(UTC)
    # Opened before the loop runs: a CLI's one file, written line by line as rows arrive.
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout

    async def work(conn: Any) -> int:
        async for line in export_lines(conn, since=args.since, until=until):
            out.write(line)
        return 0

    try:
        return asyncio.run(_audit_db(work))
    finally:
        if args.out:
            out.close()


def _cmd_audit_verify(args: argparse.Namespace) -> int:
    """Exit 0 when every link holds, 1 with the first broken one (JSON on stdout)."""
    from agentchat.agent.audit.export import Verdict, verify_db, verify_file

    if args.db:
        async def work(conn: Any) -> int:
            found = await verify_db(conn)
            print(found.to_json())
            return 0 if found.ok else 1

        return asyncio.run(_audit_db(work))
    try:
        with open(args.file, encoding="utf-8") as f:
            verdict: Verdict = verify_file(f)
    except (OSError, UnicodeDecodeError) as e:
        print(f"cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    print(verdict.to_json())
    return 0 if verdict.ok else 1


def _cmd_audit_prune(args: argparse.Namespace) -> int:
    """The retention cut on demand (the agent's sweeper makes the same one when it is due)."""
    from agentchat.agent.audit.retention import cutoff
    from agentchat.agent.audit.store import cut
    from agentchat.agent.settings import AgentSettings

    if args.before is not None:
        before = args.before
    else:
        days = args.days if args.days is not None else AgentSettings().audit_retention_days
        if days <= 0:
            print(json.dumps({"deleted": 0, "reason": "retention is 0: keep everything"}))
            return 0
        before = cutoff(days)

    async def work(conn: Any) -> int:
        print(json.dumps({**await cut(conn, before), "before": before.isoformat()}))
        return 0

    return asyncio.run(_audit_db(work))


def _audit_parser(sub: Any) -> None:
    audit = sub.add_parser("audit", help="the audit trail: export, verify, retention")
    verbs = audit.add_subparsers(dest="verb", required=True)
    exp = verbs.add_parser("export", help="write the rows appended in [since, until) as JSON "
                           "Lines with their chain hashes")
    exp.add_argument("--since", type=_when, required=True, help="ISO 8601, e.g. 2026-12-01")
    exp.add_argument("--until", type=_when, help="ISO 8601 (default: now)")
    exp.add_argument("--out", help="a file (default: stdout)")
    exp.set_defaults(func=_cmd_audit_export)
    ver = verbs.add_parser("verify", help="check a file or the database; exit 1 and name the "
                           "first broken link")
    src = ver.add_mutually_exclusive_group(required=True)
    src.add_argument("file", nargs="?", help="an export's JSON Lines file")
    src.add_argument("--db", action="store_true", help="the chain in the database")
    ver.set_defaults(func=_cmd_audit_verify)
    pru = verbs.add_parser("prune", help="delete the chain's prefix older than the retention "
                           "(keeps the anchor hash verify starts from)")
    when = pru.add_mutually_exclusive_group()
    when.add_argument("--before", type=_when, help="cut the rows appended before this time")
    when.add_argument("--days", type=float,
                      help="cut rows older than this many days "
                           "(default: AGENTCHAT_AGENT_AUDIT_RETENTION_DAYS)")
    pru.set_defaults(func=_cmd_audit_prune)


def mcp_resource() -> str:
    """The MCP endpoint's URL, its tokens' audience (AGENTCHAT_AGENT_MCP_AUDIENCE, else
    AGENTCHAT_AGENT_PUBLIC_URL + /api/agent/mcp, else this host and port's)."""
    from agentchat.agent.settings import AgentSettings

    return AgentSettings().mcp_resource


def _cmd_mcp_config(args: argparse.Namespace) -> int:
    """The `mcpServers` JSON Claude Code (`.mcp.json`) and Cursor (`mcp.json`) read: the
    endpoint over Streamable HTTP with the caller's token (docs/protocol.md §12)."""
    url = mcp_resource()
    token = args.token
    if token is None:
        settings = SharedSettings()
        if not settings.is_dev:
            print("agentchat mcp config --user needs the dev issuer: set AGENTCHAT_MODE=dev, "
                  "or give --token (a token of your identity provider for "
                  f"{url})", file=sys.stderr)
            return 2
        from agentchat.identity import DevUserIssuer

        token = DevUserIssuer(settings).mint(args.user, None, lifetime_s=args.lifetime,
                                             extra={"aud": url})
    server = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    print(json.dumps({"mcpServers": {args.name: server}}, indent=2))
    return 0


@contextlib.asynccontextmanager
async def _upstreams(catalog_path: str | None) -> AsyncIterator[tuple[Catalog, Opener]]:
    """The agent's catalog and its way to the upstreams: the same settings, credentials and
    client as the agent (AGENTCHAT_CATALOG_PATH, AGENTCHAT_AGENT_UPSTREAM_SECRETS)."""
    from agentchat.agent.gate.upstream_auth import UpstreamCredentials
    from agentchat.agent.gate.upstream_client import UpstreamClients
    from agentchat.agent.settings import AgentSettings
    from agentchat.catalog import load_catalog
    from agentchat.http_clients import async_client

    settings = AgentSettings()
    catalog = load_catalog(catalog_path or settings.catalog_path)
    async with async_client() as http:
        clients = UpstreamClients(UpstreamCredentials(folder=settings.upstream_secrets,
                                                      http=http, dev=settings.is_dev),
                                  max_result_bytes=settings.tuning.upstream_max_result_bytes)
        try:
            yield catalog, lambda server, env: clients.open(catalog, server, env)
        finally:
            await clients.aclose()


def _run_upstreams(name: str, work: Callable[[Catalog, Opener], Awaitable[tuple[int, str]]],
                   catalog_path: str | None) -> int:
    """Run a pins command: its text on stdout (exit 0, 1), or why it could not on stderr."""
    from agentchat.errors import CatalogError

    async def run() -> tuple[int, str]:
        async with _upstreams(catalog_path) as (catalog, opener):
            return await work(catalog, opener)

    try:
        code, text = asyncio.run(run())
    except CatalogError as e:
        print(f"agentchat mcp {name}: {e.detail}", file=sys.stderr)
        return 2
    # A check's report goes to stdout whatever it found; a draft that could not be made
    # says why on stderr.
    print(text, end="", file=sys.stderr if code == 2 and name == "pin" else sys.stdout)
    return code


def _cmd_mcp_pin(args: argparse.Namespace) -> int:
    """Draft catalog entries (YAML) for an upstream's tools, with their pins."""
    from agentchat.agent.gate.upstream_review import pin_drafts

    async def work(catalog: Catalog, opener: Opener) -> tuple[int, str]:
        code, text = await pin_drafts(catalog, opener, args.server, args.env)
        return code, text if code == 0 else f"agentchat mcp pin: {text}\n"

    return _run_upstreams("pin", work, args.catalog)


def _cmd_mcp_check(args: argparse.Namespace) -> int:
    """Each drift as a unified diff; exit 0 none, 1 a drift, 2 an upstream unreadable."""
    from agentchat.agent.gate.upstream_review import check_pins, check_text

    async def work(catalog: Catalog, opener: Opener) -> tuple[int, str]:
        report = await check_pins(catalog, opener)
        return report.exit_code, check_text(catalog, report)

    return _run_upstreams("check", work, args.catalog)


def _mcp_parser(sub: Any) -> None:
    mcp = sub.add_parser("mcp", help="the MCP endpoint: a client's configuration; other "
                         "teams' MCP servers: pins")
    verbs = mcp.add_subparsers(dest="verb", required=True)
    cfg = verbs.add_parser("config", help="print the mcpServers JSON for Claude Code, Cursor "
                           "or any MCP client: the endpoint and an Authorization header")
    who = cfg.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="a demo user: a dev token for the MCP audience")
    who.add_argument("--token", help="a token the identity provider issued for the endpoint")
    cfg.add_argument("--name", default="agentchat", help="the server's name in the config")
    cfg.add_argument("--lifetime", type=int, default=8 * 3600,
                     help="seconds until a dev token expires")
    cfg.set_defaults(func=_cmd_mcp_config)
    pin = verbs.add_parser("pin", help="print draft catalog entries (YAML) for an upstream MCP "
                           "server's tools, with their pins, for you to finish")
    pin.add_argument("server", help="the upstream's name in the catalog's `upstreams`")
    pin.add_argument("--env", help="read the server at this environment's URL (needed when "
                     "it has several)")
    pin.add_argument("--catalog", help="the catalog (default: AGENTCHAT_CATALOG_PATH's)")
    pin.set_defaults(func=_cmd_mcp_pin)
    chk = verbs.add_parser("check", help="compare what the upstreams serve with the catalog's "
                           "pins: a diff per drift (exit 0 none, 1 a drift, 2 unreachable)")
    chk.add_argument("--catalog", help="the catalog (default: AGENTCHAT_CATALOG_PATH's)")
    chk.set_defaults(func=_cmd_mcp_check)


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the agent service (FastAPI + Gradio + LangGraph)")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.set_defaults(func=_serve)
    _audit_parser(sub)
    _mcp_parser(sub)
