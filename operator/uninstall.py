"""`agentchat operator finalize`: what Helm's pre-delete hook runs before it removes the
operator (charts/agentchat/templates/operator/uninstall-hook.yaml).

kopf's timers keep a finalizer on the AgentChat. Helm deletes custom resources last, after
the operator's Deployment and RBAC, so nobody would remove it: the resource would stay
Terminating, its Secrets never garbage-collected, and `kubectl delete namespace` would hang.
The hook deletes the AgentChat while the operator still runs (it releases its own finalizer),
and after `wait_s` releases what is left itself (no operator: operator.enabled=false).
"""

from __future__ import annotations

import sys
import time
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentchat.operator import constants as c
from agentchat.operator.kube import MERGE_PATCH, _load_config


def finalize(name: str, namespace: str, *, wait_s: float, poll_s: float = 1.0) -> int:
    api = client.CustomObjectsApi(_load_config())
    args = (c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    try:
        api.delete_namespaced_custom_object(*args)
    except ApiException as e:
        if e.status == 404:
            print(f"AgentChat {namespace}/{name}: already gone")
            return 0
        raise
    deadline = time.monotonic() + wait_s
    released = False
    while True:
        try:
            obj = cast(dict[str, Any], api.get_namespaced_custom_object(*args))
        except ApiException as e:
            if e.status == 404:
                print(f"AgentChat {namespace}/{name}: deleted"
                      + (" (finalizers released)" if released else ""))
                return 0
            raise
        if not released and time.monotonic() >= deadline:
            left = (obj.get("metadata") or {}).get("finalizers") or []
            print(f"AgentChat {namespace}/{name}: no operator released {left} within "
                  f"{wait_s:.0f}s; releasing them", file=sys.stderr)
            api.patch_namespaced_custom_object(*args, {"metadata": {"finalizers": None}},
                                               _content_type=MERGE_PATCH)
            released = True
        time.sleep(poll_s)
