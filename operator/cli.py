"""`agentchat operator`: kopf running the AgentChat handlers, with a liveness endpoint."""

from __future__ import annotations

import argparse
import sys
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
    p.add_argument("--peering", help="the KopfPeering to share (AGENTCHAT_OPERATOR_PEERING)")
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=_cmd_operator)
    sub = p.add_subparsers(dest="operator_command")
    f = sub.add_parser("finalize", help="delete an AgentChat and wait until it is gone, "
                       "releasing its finalizers if no operator does (Helm's pre-delete hook)")
    f.add_argument("--name", required=True)
    f.add_argument("--namespace", dest="target_namespace", required=True)
    f.add_argument("--wait", type=float, default=60.0,
                   help="seconds to let a running operator finish before the finalizers "
                        "are released (0: at once, for operator.enabled=false)")
    f.set_defaults(func=_cmd_finalize)


def _cmd_finalize(args: argparse.Namespace) -> int:
    from agentchat.operator.uninstall import finalize

    return finalize(args.name, args.target_namespace, wait_s=args.wait)


def _cmd_operator(args: argparse.Namespace) -> int:
    import kopf
    from pydantic import ValidationError

    from agentchat.operator.settings import OperatorSettings
    from agentchat.settings import refusals, report_unknown_env

    # A warning per AGENTCHAT_* variable nobody reads, before the settings may refuse.
    report_unknown_env(OperatorSettings)
    try:
        OperatorSettings()  # what main.SETTINGS reads, refused here with a line, no traceback
    except ValidationError as e:
        print(f"agentchat operator: refusing to start: {refusals(OperatorSettings, e.errors())}",
              file=sys.stderr)
        return 2
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
    if args.peering:
        update["operator_peering"] = args.peering
    settings = settings.model_copy(update=update)
    namespaces = settings.operator_namespaces

    kopf.configure(verbose=args.verbose)
    from agentchat.telemetry import setup_telemetry

    setup_telemetry("agentchat-operator")  # off unless OTEL_* turn it on
    kopf.run(
        standalone=settings.operator_standalone or None,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=(f"http://{settings.operator_liveness_host}:"
                           f"{settings.operator_liveness_port}/healthz"),
        peering_name=settings.operator_peering or None,
        memo=kopf.Memo(settings=settings),
    )
    return 0
