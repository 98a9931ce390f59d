"""A Kubernetes API emulator for the operator's tests and demos: kmock in a thread.

kmock (a dev dependency, imported lazily) serves discovery, list, watch, create, merge-patch
and delete from memory. What it leaves out and this module adds:

- the resources kopf needs in discovery (namespaces, CRDs, events) and ours;
- on create, what an API server fills in: `generateName` → a name (kopf's Events use it;
  kmock would answer 409 to the second Event), `uid`, `resourceVersion` (kopf needs one on
  every seeded object), `creationTimestamp`;
- a kubeconfig file pointing at it, for both kopf and the `kubernetes` client.

- `GET /api/v1/namespaces` (list and watch), which kopf's namespaced mode (`--namespace`, as
  the chart runs it) asks for and kmock 0.8's path parser crashes on: answered here with
  NAMESPACES.

- optimistic concurrency on Secrets and ConfigMaps: every patch gets a new `resourceVersion`,
  and one that carries `metadata.resourceVersion` is refused with 409 Conflict unless it is the
  stored one (the operator's conditional writes, issue 37). Writes are serialized so that the
  check holds.

- RBAC as the chart's operator Role has it, on request: `forbid_create` names the plurals
  (secrets, configmaps) whose create answers 403 Forbidden (the chart creates those objects),
  except to this module's own helpers (Helm, the admin: header `X-Emulator-Admin`).

Limits (kmock 0.8): custom resources keep kmock's own behaviour (resourceVersions never change
on patch: kopf's timers stop seeing spec changes when they do), so kopf's consistency timeout
is 0 in the tests.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import datetime as dt
import itertools
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

from agentchat.operator import constants as c

RESOURCES: dict[str, tuple[str, bool, set[str]]] = {
    "v1/namespaces": ("Namespace", False, set()),
    "v1/secrets": ("Secret", True, set()),
    "v1/configmaps": ("ConfigMap", True, set()),
    "v1/events": ("Event", True, set()),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False,
                                                          set()),
    f"{c.GROUP}/{c.VERSION}/{c.PLURAL}": (c.KIND, True, {"status"}),
    # kopf's peering (namespaced mode), as the chart ships its CRD.
    "kopf.dev/v1/kopfpeerings": ("KopfPeering", True, set()),
}


ADMIN = {"X-Emulator-Admin": "1"}
_admin: contextvars.ContextVar[bool] = contextvars.ContextVar("admin", default=False)

# The namespaces the emulator lists (kmock keeps no Namespace objects of its own).
NAMESPACES = ("default", "team-a", "team-b")


async def _namespaces(raw_request: Any) -> Any:
    from aiohttp import web

    if raw_request.query.get("watch") in ("true", "1"):
        # Nothing ever changes: a watch that stays open until the client gives up.
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(raw_request)
        await asyncio.sleep(float(raw_request.query.get("timeoutSeconds") or 600))
        return resp
    return web.json_response({
        "apiVersion": "v1", "kind": "NamespaceList", "metadata": {"resourceVersion": "1"},
        "items": [{"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "uid": ns, "resourceVersion": "1",
                                "labels": {"kubernetes.io/metadata.name": ns}}}
                  for ns in NAMESPACES]})


def _emulator_class(forbid_create: set[str]) -> type:
    import kmock
    from kmock import KubernetesEmulator

    counter = itertools.count(1)

    # Instances, not subclasses with class attributes: kmock's errors are attrs classes whose
    # __init__ sets every field (a subclass's `status = 409` would answer 500).
    def conflict() -> Exception:
        return kmock.KubernetesError(  # type: ignore[no-any-return]
            status=409, reason="Conflict",
            message="Operation cannot be fulfilled: the object has been modified; please apply "
                    "your changes to the latest version and try again")

    def forbidden() -> Exception:
        return kmock.KubernetesError(  # type: ignore[no-any-return]
            status=403, reason="Forbidden",
            message="the Role grants no create on this resource")

    writes = asyncio.Lock()

    class Emulator(KubernetesEmulator):  # type: ignore[misc]
        async def __call__(self, raw_request: Any) -> Any:
            if raw_request.path.rstrip("/") == "/api/v1/namespaces":
                return await _namespaces(raw_request)
            token = _admin.set(bool(raw_request.headers.get("X-Emulator-Admin")))
            try:
                return await super().__call__(raw_request)
            finally:
                _admin.reset(token)

        async def _handle(self, request: Any) -> Any:
            if request.action == kmock.action.CREATE and not _admin.get() and \
                    request.resource.plural in forbid_create:
                raise forbidden()
            if request.action == kmock.action.CREATE and isinstance(request.data, dict):
                meta = request.data.setdefault("metadata", {})
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:6]
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("resourceVersion", str(next(counter)))
                meta.setdefault("creationTimestamp",
                                dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
            if request.action != kmock.action.UPDATE or not isinstance(request.data, dict) \
                    or request.resource.plural not in ("secrets", "configmaps"):
                return await super()._handle(request)
            async with writes:  # the check and the write as one step
                key = (request.resource, request.namespace, request.name)
                stored = self._objects[key] if key in self._objects else None
                meta = request.data.setdefault("metadata", {})
                wanted = meta.get("resourceVersion")
                if stored is not None and not stored.deleted and wanted is not None and \
                        wanted != (stored.get("metadata") or {}).get("resourceVersion"):
                    raise conflict()
                meta["resourceVersion"] = str(next(counter))
                return await super()._handle(request)

    return Emulator


class KubeEmulator:
    """Start with `start()`, stop with `stop()`; `url`, `kubeconfig` and helpers to look."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.kubeconfig = self.folder / "kubeconfig.yaml"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kmock")
        self._stop: asyncio.Event | None = None
        self.forbid_create: set[str] = set()  # plurals whose create is refused (403)
        self.url = ""
        self.handler: Any = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        import kmock

        self._stop = asyncio.Event()
        emulator = _emulator_class(self.forbid_create)
        async with emulator() as handler, kmock.Server(handler) as server:
            for key, (kind, namespaced, subresources) in RESOURCES.items():
                handler.resources[key] = kmock.ResourceInfo(
                    kind=kind, singular=kind.lower(), namespaced=namespaced,
                    verbs={"get", "list", "watch", "create", "patch", "delete"},
                    subresources=subresources)
            self.handler = handler
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def start(self) -> KubeEmulator:
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("kmock did not start")
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
            "clusters": [{"name": "kmock", "cluster": {"server": self.url}}],
            "users": [{"name": "kmock", "user": {}}],
            "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
        }))
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    # --- looking and poking, over HTTP like any client ---

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(self.url + path, json=obj, timeout=10, headers=ADMIN)
        r.raise_for_status()
        return dict(r.json())

    def create_agentchat(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self.create(f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{namespace}/{c.PLURAL}", {
            "apiVersion": c.API_VERSION, "kind": c.KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec})

    def create_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.create(f"/api/v1/namespaces/{namespace}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})

    def patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        r = httpx.patch(self.url + path, json=patch, timeout=10,
                        headers={"Content-Type": "application/merge-patch+json"})
        r.raise_for_status()
        return dict(r.json())

    def delete(self, path: str) -> None:
        r = httpx.delete(self.url + path, timeout=10)
        if r.status_code != 404:
            r.raise_for_status()

    def patch_agentchat_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self.patch(f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{namespace}/{c.PLURAL}/{name}",
                   {"spec": spec})

    def get(self, path: str) -> dict[str, Any] | None:
        r = httpx.get(self.url + path, timeout=10)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return dict(r.json())

    def agentchat(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{namespace}/{c.PLURAL}/{name}")

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        obj = self.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if obj is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        obj = self.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        return None if obj is None else dict(obj.get("data") or {})

    def events(self, namespace: str) -> list[dict[str, Any]]:
        obj = self.get(f"/api/v1/namespaces/{namespace}/events") or {}
        return list(obj.get("items") or [])

    def writes(self, namespace: str, name: str, kind: str = "secrets") -> int:
        """How many versions of the object the emulator has recorded (creates and patches)."""
        for (resource, ns, nm), obj in list(self.handler.objects.items()):
            if resource.plural == kind and ns == namespace and nm == name:
                return len(list(obj.history))
        return 0

    def dump(self) -> str:
        return json.dumps({f"{r.plural}/{ns}/{nm}": o.raw
                           for (r, ns, nm), o in list(self.handler.objects.items())},
                          indent=1, default=str)[:20000]
