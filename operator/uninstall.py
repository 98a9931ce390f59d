"""`agentchat operator finalize`: what Helm's pre-delete hook runs before it removes the
operator (charts/agentchat/templates/operator/uninstall-hook.yaml).

kopf's timers keep a finalizer on the AgentChat. Helm deletes custom resources last, after
the operator's Deployment and RBAC, so nobody would remove it: the resource would stay
Terminating, its Secrets never garbage-collected, and `kubectl delete namespace` would hang.
The hook deletes the AgentChat while the operator still runs (it releases its own finalizer),
and after `wait_s` releases what is left itself (no operator: operator.enabled=false).

Without the hook (`helm uninstall --no-hooks`, `kubectl delete namespace`, Argo CD) the
AgentChat may be deleted while the operator is stopping: `release_deleting` (run by the
operator's cleanup) releases kopf's finalizer on every AgentChat of its own that is being
deleted, so nothing stays Terminating. The finalizer guards only kopf's timers: what the
operator wrote is owned by the AgentChat (ownerReferences), so the garbage collector removes it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
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


def release_deleting(namespaces: Sequence[str], instance: str, finalizer: str, *,
                     watch_s: float, poll_s: float = 0.5) -> list[str]:
    """Drop `finalizer` from the AgentChats (of `instance`, when set) being deleted, for
    `watch_s` (a deletion racing the operator's own shutdown); returns their names."""
    api = client.CustomObjectsApi(_load_config())
    selector = f"{c.LABEL_RELEASE}={instance}" if instance else ""
    released: list[str] = []
    deadline = time.monotonic() + watch_s
    while True:
        found: list[dict[str, Any]] = []
        lists = ([api.list_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL,
                                                    label_selector=selector)
                  for ns in namespaces] if namespaces else
                 [api.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL,
                                                 label_selector=selector)])
        for listed in lists:
            found += cast(dict[str, Any], listed).get("items") or []
        for obj in found:
            meta = obj.get("metadata") or {}
            left = meta.get("finalizers") or []
            if not meta.get("deletionTimestamp") or finalizer not in left:
                continue
            keep = [f for f in left if f != finalizer]
            try:
                api.patch_namespaced_custom_object(
                    c.GROUP, c.VERSION, meta["namespace"], c.PLURAL, meta["name"],
                    {"metadata": {"finalizers": keep or None,
                                  "resourceVersion": meta.get("resourceVersion")}},
                    _content_type=MERGE_PATCH)
            except ApiException as e:
                if e.status not in (404, 409):  # gone, or changed: the next poll looks again
                    raise
                continue
            released.append(f"{meta['namespace']}/{meta['name']}")
        if time.monotonic() >= deadline:
            return released
        time.sleep(poll_s)
