"""The catalog file as it is now, for a process that reloads it live (the agent; the sidecar
reloads it with its policy, policy/reload.py).

`current()` is what the file held at the last check, never I/O: a background task
(`watch`) stats the file every `check_s` in a worker thread and parses a changed one there
(PyYAML takes ~40 ms over the shipped catalog). A broken edit keeps the last good catalog and
is logged, as the sidecar does. The file is stat'ed through its path, so a ConfigMap's
symlink swap counts as a change.

Every check the agent asks carries `current().revision`, and a request is built only from
the catalog of the revision its decision was judged under (agent/graph/builder.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from agentchat.catalog import Catalog, load_catalog
from agentchat.errors import CatalogError

log = logging.getLogger("agentchat.catalog")

Stamp = tuple[int, int, int]


class CatalogSource:
    def __init__(self, path: Path | str, *, check_s: float = 1.0) -> None:
        self.path = Path(path)
        self.check_s = check_s
        self._stamp = self._stat()
        self._catalog = load_catalog(self.path)  # at start a broken catalog is fatal
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def current(self) -> Catalog:
        return self._catalog

    def _stat(self) -> Stamp | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def refresh(self) -> bool:
        """Reload when the file changed (blocking: call it in a worker thread); True when a
        new revision is now current."""
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            catalog = load_catalog(self.path)
        except CatalogError as e:
            log.error("catalog reload failed, still serving revision %s: %s",
                      self._catalog.revision, e.detail)
            return False
        if catalog.revision == self._catalog.revision:
            return False
        self._catalog = catalog
        log.info("catalog revision %s loaded from %s", catalog.revision, self.path)
        return True

    def start(self) -> None:
        """`refresh` every `check_s` in the background, until `aclose`."""
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._watch(self._stop))

    async def aclose(self) -> None:
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None

    async def _watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.check_s)
            except TimeoutError:
                await asyncio.to_thread(self.refresh)
