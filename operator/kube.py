"""Secrets and ConfigMaps through the official `kubernetes` client.

The client is synchronous, so calls run in a worker thread. Writes are create-or-merge-patch
of the `data` map (a 409 on create means someone created it first: patch it instead), and
are skipped when the stored data already matches, so an unchanged tick writes nothing.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
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

    async def read_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            obj = await self._call(f"read Secret {namespace}/{name}",
                                   self.core.read_namespaced_secret, name, namespace)
        except KubeError as e:
            if e.status == 404:
                return None
            raise
        return _unb64(obj.data)

    async def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            obj = await self._call(f"read ConfigMap {namespace}/{name}",
                                   self.core.read_namespaced_config_map, name, namespace)
        except KubeError as e:
            if e.status == 404:
                return None
            raise
        return dict(obj.data or {})

    async def apply_secret(self, owner: dict[str, Any], name: str, data: dict[str, str],
                           part: str) -> bool:
        """Make the Secret hold `data`; True when something was written."""
        namespace = owner["metadata"]["namespace"]
        if await self.read_secret(namespace, name) == data:
            return False
        encoded = {k: _b64(v) for k, v in data.items()}
        body = self._manifest(owner, "Secret", name, part)
        body.update(type="Opaque", data=encoded)
        what = f"write Secret {namespace}/{name}"
        try:
            await self._call(what, self.core.create_namespaced_secret, namespace, body)
        except KubeError as e:
            if e.status != 409:
                raise
            await self._call(what, self.core.patch_namespaced_secret, name, namespace,
                             {"data": encoded}, _content_type=MERGE_PATCH)
        return True

    async def apply_config_map(self, owner: dict[str, Any], name: str, data: dict[str, str],
                               part: str) -> bool:
        namespace = owner["metadata"]["namespace"]
        if await self.read_config_map(namespace, name) == data:
            return False
        body = self._manifest(owner, "ConfigMap", name, part)
        body.update(data=data)
        what = f"write ConfigMap {namespace}/{name}"
        try:
            await self._call(what, self.core.create_namespaced_config_map, namespace, body)
        except KubeError as e:
            if e.status != 409:
                raise
            await self._call(what, self.core.patch_namespaced_config_map, name, namespace,
                             {"data": data}, _content_type=MERGE_PATCH)
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
