"""`agentchat sandbox`: run the stand-in ss-tools API (dev and tests only)."""

from __future__ import annotations

import argparse
import sys


def _cmd_sandbox(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from agentchat.errors import CatalogError
    from agentchat.sandbox.app import create_app
    from agentchat.sandbox.settings import SandboxSettings
    from agentchat.settings import refusals, report_unknown_env

    # A warning per AGENTCHAT_* variable nobody reads, before the settings may refuse.
    report_unknown_env(SandboxSettings)
    try:
        settings = SandboxSettings()
        app = create_app(settings)
    except ValidationError as e:
        # One line per refusal, never the input (the environment holds the client secret).
        print(f"agentchat sandbox: refusing to start: {refusals(SandboxSettings, e.errors())}",
              file=sys.stderr)
        return 2
    except CatalogError as e:
        # A clear refusal instead of a traceback; settings errors never include the input.
        print(f"agentchat sandbox: refusing to start: {e}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host or settings.host, port=args.port or settings.port,
                log_level="info")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("sandbox", help="run the sandbox ss-tools API (dev only)")
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8800)")
    p.set_defaults(func=_cmd_sandbox)
