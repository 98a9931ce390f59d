"""Operator start: kopf's settings and the shared clients the handlers use."""

from __future__ import annotations

import secrets

import kopf

from agentchat.operator.kube import Kube
from agentchat.operator.settings import OperatorSettings


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
