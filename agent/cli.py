"""`agentchat serve`: run the agent service."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from agentchat.agent.main import create_app
    from agentchat.agent.settings import AgentSettings
    from agentchat.settings import report_unknown_env

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
        reasons = "; ".join(err["msg"] for err in e.errors())
        print(f"agentchat serve: refusing to start: {reasons}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level="warning", timeout_graceful_shutdown=10)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the agent service (FastAPI + Gradio + LangGraph)")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.set_defaults(func=_serve)
