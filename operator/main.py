"""kopf handlers, each a few lines calling a plain function in handlers/.

Both timers tick every AGENTCHAT_OPERATOR_TUNING__TICK_S and do nothing unless something is due:
kopf fires timers at every start, so due checks against status keep a restart harmless.
"""

from __future__ import annotations

from typing import Any

import kopf

from agentchat.operator import constants as c
from agentchat.operator import metrics
from agentchat.operator.handlers.handle_prune_agentchat import handle_prune_agentchat
from agentchat.operator.handlers.handle_rotate_agentchat import handle_rotate_agentchat
from agentchat.operator.handlers.handle_startup_operator import (
    handle_cleanup_operator,
    handle_startup_operator,
)
from agentchat.operator.settings import OperatorSettings

SETTINGS = OperatorSettings()
# Read once at import, as kopf registers handlers then (AGENTCHAT_OPERATOR_INSTANCE).
LABELS = {c.LABEL_RELEASE: SETTINGS.operator_instance} if SETTINGS.operator_instance else None


@kopf.on.startup(id="configure")
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    await handle_startup_operator(kopf_settings=settings, memo=memo,
                                  settings=memo.get("settings") or SETTINGS)


@kopf.on.cleanup(id="stop-metrics")
async def stop_metrics(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
    await handle_cleanup_operator(memo=memo, kopf_settings=settings)


@kopf.timer(c.GROUP, c.VERSION, c.PLURAL, id="rotate-keys", interval=SETTINGS.tuning.tick_s,
            labels=LABELS)
async def rotate_keys(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int = 0,
                      **_: Any) -> None:
    await handle_rotate_agentchat(body=body, patch=patch, retry=retry,
                                  settings=memo["settings"], kube=memo["kube"])


@kopf.timer(c.GROUP, c.VERSION, c.PLURAL, id="prune-checkpoints",
            interval=SETTINGS.tuning.tick_s, labels=LABELS)
async def prune_checkpoints(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int = 0,
                            **_: Any) -> None:
    await handle_prune_agentchat(body=body, patch=patch, retry=retry, memo=memo,
                                 settings=memo["settings"], kube=memo["kube"])


# optional: no finalizer, so a deletion never waits on the operator; a deletion missed while
# no operator ran leaves series only until that process restarts (they are in memory).
@kopf.on.delete(c.GROUP, c.VERSION, c.PLURAL, id="forget-metrics", optional=True,
                labels=LABELS)
async def forget_metrics(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
    dropped = metrics.forget(metrics.resource(body))
    logger.info("deleted: %d metric series dropped", dropped)
