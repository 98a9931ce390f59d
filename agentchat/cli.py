"""The `agentchat` command line. Each component adds its own sub-commands through a
`register(subparsers)` function in its `cli` module, listed in COMPONENT_CLIS."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
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
    print(issuer.mint(args.user, roles, lifetime_s=args.lifetime or 8 * 3600))
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from agentchat.db import migrate_url, resolve_database_url

    applied = asyncio.run(migrate_url(resolve_database_url(SharedSettings())))
    print(f"applied {applied} migration(s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentchat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    tok = sub.add_parser("token", help="print a JWT: a dev user's token or a service token")
    who = tok.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="a demo user (alice, bob, carol) or any name with --roles")
    who.add_argument("--service", action="store_true", help="a service token signed by our key")
    tok.add_argument("--roles", help="comma-separated roles (role or role@env)")
    tok.add_argument("--lifetime", type=int, help="seconds until the token expires")
    tok.set_defaults(func=_cmd_token)

    mig = sub.add_parser("migrate", help="apply the database migrations")
    mig.set_defaults(func=_cmd_migrate)

    for name in COMPONENT_CLIS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
