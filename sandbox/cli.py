"""`agentchat sandbox`: run the stand-in ss-tools API (dev and tests only)."""

from __future__ import annotations

import argparse


def _cmd_sandbox(args: argparse.Namespace) -> int:
    import uvicorn
    from agentchat.sandbox.app import create_app
    from agentchat.sandbox.settings import SandboxSettings

    settings = SandboxSettings()
    host = args.host or settings.host
    port = args.port or settings.port
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("sandbox", help="run the sandbox ss-tools API (dev only)")
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8800)")
    p.set_defaults(func=_cmd_sandbox)
