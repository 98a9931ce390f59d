"""Operator start: kopf's settings and the shared clients the handlers use."""

from __future__ import annotations

import logging
import secrets

import kopf

from agentchat.operator import metrics
from agentchat.operator.kube import Kube
from agentchat.operator.settings import OperatorSettings

log = logging.getLogger("agentchat.operator")


async def handle_startup_operator(*, kopf_settings: kopf.OperatorSettings, memo: kopf.Memo,
                                  settings: OperatorSettings) -> None:
    # kopf waits this long for its own patches to come back through the watch; with an API
    # that does not bump resourceVersion (the test emulator) it must be 0.
    kopf_settings.persistence.consistency_timeout = settings.operator_consistency_timeout_s
    kopf_settings.posting.level = 20  # Events for info and above (rotations, prunes)
    kopf_settings.execution.max_workers = 4
    # Replicas of one Deployment share a peering object: equal priorities would freeze all
    # of them (kopf's rule), so each picks a random one; the highest acts.
    kopf_settings.peering.priority = secrets.randbelow(2**31 - 2) + 1
    memo["settings"] = settings
    memo["kube"] = Kube()
    # Every replica serves /metrics (only the acting one has samples). A taken port is logged
    # and the operator runs on: renewing the token matters more than counting it, and the
    # AgentChatOperatorMetricsAbsent alert says the metrics are gone.
    try:
        memo["metrics_server"] = metrics.serve(settings.operator_metrics_host,
                                               settings.operator_metrics_port)
    except OSError as e:
        log.error("no metrics server on port %d: %s", settings.operator_metrics_port, e)


async def handle_cleanup_operator(*, memo: kopf.Memo) -> None:
    server = memo.get("metrics_server")
    if server is not None:
        server.shutdown()
        server.server_close()
