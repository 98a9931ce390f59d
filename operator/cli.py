"""`agentchat operator`: kopf running the AgentChat handlers, with a liveness endpoint."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "operator", help="run the AgentChat operator (keys, service token, pruning)")
    p.add_argument("--standalone", action="store_true",
                   help="no peering: the only operator (run a single replica)")
    p.add_argument("--namespace", action="append", default=None,
                   help="serve this namespace (repeatable); default: cluster-wide")
    p.add_argument("--host", help="liveness host (default AGENTCHAT_OPERATOR_LIVENESS_HOST)")
    p.add_argument("--port", "--liveness-port", dest="port", type=int,
                   help="liveness port (default AGENTCHAT_OPERATOR_LIVENESS_PORT, 8080)")
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=_cmd_operator)


def _cmd_operator(args: argparse.Namespace) -> int:
    import kopf

    from agentchat.operator.settings import OperatorSettings
    from agentchat.settings import report_unknown_env

    # A warning per AGENTCHAT_* variable nobody reads, before the settings may refuse.
    report_unknown_env(OperatorSettings)
    from agentchat.operator import main  # registers the handlers

    settings = main.SETTINGS
    update: dict[str, Any] = {}
    if args.host:
        update["operator_liveness_host"] = args.host
    if args.port:
        update["operator_liveness_port"] = args.port
    if args.namespace:
        update["operator_namespaces"] = args.namespace
    if args.standalone:
        update["operator_standalone"] = True
    settings = settings.model_copy(update=update)
    namespaces = settings.operator_namespaces

    kopf.configure(verbose=args.verbose)
    kopf.run(
        standalone=settings.operator_standalone or None,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=(f"http://{settings.operator_liveness_host}:"
                           f"{settings.operator_liveness_port}/healthz"),
        memo=kopf.Memo(settings=settings),
    )
    return 0
