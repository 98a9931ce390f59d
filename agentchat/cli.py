"""The `agentchat` command line. Each component adds its own sub-commands through a
`register(subparsers)` function in its `cli` module, listed in COMPONENT_CLIS."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from collections.abc import Sequence

from agentchat.settings import SharedSettings

# Modules with `register(subparsers)`; heavy imports stay inside their command functions.
COMPONENT_CLIS = [
    "agentchat.agent.cli",
    "agentchat.operator.cli",
    "agentchat.policy.cli",
    "agentchat.sandbox.cli",
    "agentchat.demo",
]


def _cmd_token(args: argparse.Namespace) -> int:
    from agentchat.identity import DevUserIssuer
    from agentchat.keys import ensure_ring, sign_service_token

    settings = SharedSettings()
    if args.service:
        ring = ensure_ring(settings.keys_dir, settings.jwks_path)
        print(sign_service_token(
            ring, issuer=settings.service_issuer, audience=settings.service_audience,
            lifetime_s=args.lifetime or settings.service_token_lifetime_s,
        ))
        return 0
    if not settings.is_dev:
        # User tokens come from ss-tools in production; the dev issuer is a local stand-in.
        print("agentchat token --user needs the dev issuer: set AGENTCHAT_MODE=dev "
              f"(the mode is {settings.mode!r}); production user tokens come from ss-tools",
              file=sys.stderr)
        return 2
    roles = args.roles.split(",") if args.roles is not None else None
    issuer = DevUserIssuer(settings)
    extra = None
    if args.audience == "mcp":
        # A token for the MCP endpoint only (RFC 8707): /chat and REST refuse it.
        from agentchat.agent.cli import mcp_resource

        extra = {"aud": mcp_resource()}
    print(issuer.mint(args.user, roles, lifetime_s=args.lifetime or 8 * 3600, extra=extra))
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    import psycopg

    from agentchat.db import (
        MigrationLimits,
        SchemaTooOld,
        migrate_url,
        resolve_database_url,
        wait_for_schema,
    )

    url = resolve_database_url(SharedSettings())
    if args.check:
        try:
            version = asyncio.run(wait_for_schema(url, wait_s=0))
        except SchemaTooOld as e:
            print(e, file=sys.stderr)
            return 1
        print(f"schema at migration {version}")
        return 0
    limits = MigrationLimits(lock_timeout_ms=args.lock_timeout_ms,
                             statement_timeout_ms=args.statement_timeout_ms,
                             attempts=args.attempts)
    # The database may still be starting (the dev chart's PostgreSQL beside a post-install
    # Job): connection failures are retried for --wait-for-database seconds.
    deadline = time.monotonic() + args.wait_for_database
    while True:
        try:
            applied = asyncio.run(migrate_url(url, limits))
            break
        except psycopg.OperationalError as e:
            if time.monotonic() >= deadline or not _unreachable(e):
                raise
            print("the database does not answer yet; retrying", file=sys.stderr)
            time.sleep(2)
    print(f"applied {applied} migration(s)")
    return 0


def _unreachable(e: Exception) -> bool:
    """A connection that could not be made (not a statement that failed)."""
    import psycopg

    return not isinstance(e, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled) \
        and getattr(e, "sqlstate", None) in (None, "57P03", "08006", "08001")



def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentchat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    tok = sub.add_parser("token", help="print a JWT: a dev user's token or a service token")
    who = tok.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="a demo user (alice, bob, carol) or any name with --roles")
    who.add_argument("--service", action="store_true", help="a service token signed by our key")
    tok.add_argument("--roles", help="comma-separated roles (role or role@env)")
    tok.add_argument("--lifetime", type=int, help="seconds until the token expires")
    tok.add_argument("--audience", choices=["chat", "mcp"], default="chat",
                     help="a user token's audience: /chat and REST (default), or the MCP "
                          "endpoint (agentchat mcp config prints a client's configuration)")
    tok.set_defaults(func=_cmd_token)

    mig = sub.add_parser("migrate", help="apply the database migrations (the chart's hook Job"
                         " runs this once per release)")
    mig.add_argument("--lock-timeout-ms", type=int, default=5000,
                     help="lock_timeout of every statement; a statement that waits longer gives"
                          " up, so writers queued behind it go on, and is retried")
    mig.add_argument("--statement-timeout-ms", type=int, default=30 * 60 * 1000,
                     help="statement_timeout of every statement (an index build included)")
    mig.add_argument("--attempts", type=int, default=30,
                     help="lock timeouts tolerated per migration before failing")
    mig.add_argument("--wait-for-database", type=float, default=120.0, metavar="S",
                     help="retry connecting this long while the database starts")
    mig.add_argument("--check", action="store_true",
                     help="only say whether the schema is at least what this version needs"
                          " (exit 1 if older)")
    mig.set_defaults(func=_cmd_migrate)

    for name in COMPONENT_CLIS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
