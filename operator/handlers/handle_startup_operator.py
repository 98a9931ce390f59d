"""Operator start: kopf's settings and the shared clients the handlers use."""

from __future__ import annotations

import asyncio
import logging
import secrets

import kopf

from agentchat.operator import metrics
from agentchat.operator.kube import Kube
from agentchat.operator.settings import OperatorSettings
from agentchat.operator.uninstall import release_deleting

log = logging.getLogger("agentchat.operator")


async def handle_startup_operator(*, kopf_settings: kopf.OperatorSettings, memo: kopf.Memo,
                                  settings: OperatorSettings) -> None:
    # kopf waits this long for its own patches to come back through the watch; with an API
    # that does not bump resourceVersion (the test emulator) it must be 0.
    kopf_settings.persistence.consistency_timeout = settings.tuning.consistency_timeout_s
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


async def handle_cleanup_operator(*, memo: kopf.Memo, kopf_settings: kopf.OperatorSettings
                                  ) -> None:
    settings: OperatorSettings | None = memo.get("settings")
    if settings is not None and settings.operator_release_on_stop_s > 0:
        # An AgentChat deleted while no operator will run again (an uninstall without its
        # hook, a namespace deleted) must not stay Terminating on our finalizer.
        try:
            released = await asyncio.to_thread(
                release_deleting, settings.operator_namespaces, settings.operator_instance,
                kopf_settings.persistence.finalizer, watch_s=settings.operator_release_on_stop_s)
        except Exception as e:  # the API gone, RBAC deleted first: stop anyway
            log.warning("could not release finalizers on stop: %s", type(e).__name__)
        else:
            for name in released:
                log.info("AgentChat %s is being deleted: released its finalizer", name)
    server = memo.get("metrics_server")
    if server is not None:
        server.shutdown()
        server.server_close()
