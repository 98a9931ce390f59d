"""Secrets and ConfigMaps through the official `kubernetes` client.

The client is synchronous, so calls run in a worker thread. Every write is conditional on what
was read (operator/README.md, one writer): a create when it was absent, a merge patch carrying the
resourceVersion read otherwise; either answers 409 when someone wrote in between (`Conflict`), so of
two operators acting at once one writes and the other re-reads and re-plans. A write whose data
matches what was read is skipped, so an unchanged tick writes nothing.

The chart creates the objects empty (its Role grants no `create`): the first write fills one
and adds the AgentChat to its ownerReferences, so deleting the AgentChat still collects it.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from agentchat.errors import LocalError
from agentchat.operator import constants as c


def as_body(obj: Mapping[str, Any]) -> kopf.Body:
    """An object for kopf's event and owner functions, which read any mapping with `metadata`
    at run time but are typed for kopf's own `Body`."""
    return cast(kopf.Body, obj)

MERGE_PATCH = "application/merge-patch+json"


class KubeError(LocalError):
    """The Kubernetes API refused or could not be reached; `status` is the HTTP code or 0."""

    def __init__(self, what: str, status: int, reason: str) -> None:
        super().__init__(f"{what}: {status or 'unreachable'} {reason}".strip())
        self.status = status


class Conflict(KubeError):
    """Someone (another operator) wrote the object since it was read: re-read and re-plan."""


@dataclass(frozen=True)
class Seen:
    """An object as read: its data and the resourceVersion a write is conditional on."""

    data: dict[str, str]
    version: str
    owners: tuple[dict[str, Any], ...] = ()  # metadata.ownerReferences


def _load_config() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(data: dict[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (data or {}).items()}


class Kube:
    def __init__(self, api: client.ApiClient | None = None) -> None:
        self.core = client.CoreV1Api(api or _load_config())

    async def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except ApiException as e:
            raise KubeError(what, int(e.status or 0), str(e.reason or "")) from None
        except Exception as e:  # urllib3 connection errors and the like
            raise KubeError(what, 0, type(e).__name__) from None

    async def read(self, kind: str, namespace: str, name: str) -> Seen | None:
        """A Secret's or ConfigMap's data (decoded) and the resourceVersion read with it."""
        fn = (self.core.read_namespaced_secret if kind == "Secret"
              else self.core.read_namespaced_config_map)
        try:
            obj = await self._call(f"read {kind} {namespace}/{name}", fn, name, namespace)
        except KubeError as e:
            if e.status == 404:
                return None
            raise
        data = _unb64(obj.data) if kind == "Secret" else dict(obj.data or {})
        owners = tuple(self.core.api_client.sanitize_for_serialization(ref)
                       for ref in obj.metadata.owner_references or ())
        return Seen(data=data, version=str(obj.metadata.resource_version or ""),
                    owners=owners)

    async def read_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        seen = await self.read("Secret", namespace, name)
        return None if seen is None else seen.data

    async def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        seen = await self.read("ConfigMap", namespace, name)
        return None if seen is None else seen.data

    async def write(self, owner: dict[str, Any], kind: str, name: str, data: dict[str, str],
                    part: str, seen: Seen | None) -> bool:
        """Make the object hold `data`, on condition that it is still as `seen` (None: it did
        not exist); True when something was written. Someone else's write since: Conflict."""
        owners = None if seen is None else _adopted(seen.owners, owner)
        if seen is not None and seen.data == data and owners is None:
            return False
        namespace = owner["metadata"]["namespace"]
        secret = kind == "Secret"
        payload = {k: _b64(v) for k, v in data.items()} if secret else dict(data)
        what = f"write {kind} {namespace}/{name}"
        try:
            if seen is None:
                body = self._manifest(owner, kind, name, part)
                body.update(data=payload, **({"type": "Opaque"} if secret else {}))
                create = (self.core.create_namespaced_secret if secret
                          else self.core.create_namespaced_config_map)
                await self._call(what, create, namespace, body)
            else:
                patch = (self.core.patch_namespaced_secret if secret
                         else self.core.patch_namespaced_config_map)
                # The resourceVersion makes the API server refuse it (409) if anyone wrote
                # since we read: two operators can never both write.
                meta: dict[str, Any] = {"resourceVersion": seen.version}
                if owners is not None:
                    meta["ownerReferences"] = owners
                await self._call(what, patch, name, namespace,
                                 {"metadata": meta, "data": payload},
                                 _content_type=MERGE_PATCH)
        except KubeError as e:
            if e.status == 409:
                raise Conflict(what, 409, "changed since it was read") from None
            if e.status == 403 and seen is None:
                # The chart's Role grants no create: the chart makes these objects.
                raise KubeError(what, 403, "forbidden: the object is missing and the operator "
                                "may not create it; the chart creates it empty (helm upgrade "
                                "restores a deleted one)") from None
            raise
        return True

    @staticmethod
    def _manifest(owner: dict[str, Any], kind: str, name: str, part: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "labels": {
                c.LABEL_MANAGED_BY: c.MANAGED_BY,
                c.LABEL_INSTANCE: owner["metadata"]["name"],
                c.LABEL_PART: part,
            }},
        }
        # Owned by the AgentChat: deleting it garbage-collects what it wrote.
        kopf.adopt(body, owner=as_body(owner))
        return body


def _adopted(owners: tuple[dict[str, Any], ...],
             owner: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The ownerReferences with the AgentChat added, or None when it is among them already (a
    merge patch replaces the whole list, so the others are carried over)."""
    body: dict[str, Any] = {"metadata": {"ownerReferences": [dict(o) for o in owners]}}
    kopf.append_owner_reference(body, owner=as_body(owner))
    refs: list[dict[str, Any]] = body["metadata"]["ownerReferences"]
    return None if len(refs) == len(owners) else refs
