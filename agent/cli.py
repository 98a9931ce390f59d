"""`agentchat serve`: run the agent service."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from agentchat.agent.main import MountPathClash, create_app
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


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the agent service (FastAPI + Gradio + LangGraph)")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.set_defaults(func=_serve)
