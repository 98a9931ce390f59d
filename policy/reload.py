"""The serving snapshot and its safe hot reload.

A change in the policy folder, its tests' folder or the catalog (a ConfigMap swaps a `..data`
symlink, so the whole folder changes at once) builds a new snapshot, validates it, runs the
policy tests (the folder's tests/, or AGENTCHAT_POLICY_TESTS_DIR), and only then swaps one
reference. Requests read that reference once, so each sees one whole policy. When a step
fails, the last good snapshot keeps serving and the failure is reported in the log, `/readyz`
and the metrics.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from watchfiles import awatch

from agentchat.catalog import Catalog, catalog_revision, parse_catalog
from agentchat.errors import CatalogError, LocalError

from .cases import TestReport, run_policy_tests
from .rules import TESTS_DIR, PolicyError, read_folder, validate
from .snapshot import Snapshot

log = logging.getLogger("agentchat.policy")


class ReloadError(LocalError):
    """A policy, catalog or policy test refused a reload; the message says which and why."""


# Parsed catalogs by content digest: PyYAML parses the catalog in ~40 ms, far more than the
# rest of a reload, and a policy edit rarely comes with a catalog edit.
_CATALOGS: dict[str, Catalog] = {}


def build_snapshot(policy_dir: Path, catalog_path: Path,
                   tests_dir: Path | None = None) -> tuple[Snapshot, TestReport]:
    """Read, validate and compile a policy folder against a catalog and run its tests (from
    `tests_dir` when given, else the folder's tests/)."""
    try:
        data = Path(catalog_path).read_bytes()  # once: the revision is of what is parsed
    except OSError as e:
        raise ReloadError(f"{catalog_path}: cannot read the catalog: {e.strerror}") from None
    catalog_digest = catalog_revision(data)
    try:
        catalog = _CATALOGS.get(catalog_digest)
        if catalog is None:
            catalog = parse_catalog(data, catalog_path)
            if len(_CATALOGS) >= 4:
                _CATALOGS.clear()
            _CATALOGS[catalog_digest] = catalog
        source = read_folder(policy_dir, tests_dir=tests_dir)
        validate(source, catalog)
    except (CatalogError, PolicyError) as e:
        raise ReloadError(str(e.detail if isinstance(e, CatalogError) else e)) from None
    # The revision names the policy and the catalog it was compiled with: both change answers.
    digest = hashlib.sha256(f"{source.revision}\0{catalog_digest}".encode())
    snapshot = Snapshot(replace(source, revision=digest.hexdigest()[:16]), catalog)
    return snapshot, run_policy_tests(snapshot)


def _iso(ts: float | None) -> str | None:
    return (datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
            if ts is not None else None)


@dataclass
class ReloadStatus:
    result: str  # "loaded", "unchanged" or "failed"
    revision: str | None
    error: str | None = None


class PolicyStore:
    """Holds the serving snapshot; `reload()` replaces it only with one that passed every step."""

    def __init__(self, policy_dir: Path, catalog_path: Path,
                 tests_dir: Path | None = None) -> None:
        self.policy_dir = Path(policy_dir)
        self.catalog_path = Path(catalog_path)
        # The tests' own folder (AGENTCHAT_POLICY_TESTS_DIR), watched like the policy; None:
        # the policy folder's tests/.
        self.tests_dir = Path(tests_dir) if tests_dir is not None else None
        if self.tests_dir == self.policy_dir / TESTS_DIR:
            self.tests_dir = None
        self.snapshot: Snapshot | None = None
        self.last_error: str | None = None
        self.loaded_at: float | None = None
        self.reloads_ok = 0
        self.reloads_failed = 0
        # For GET /v1/policy: the serving policy's own test result, and the last edit that
        # was refused (kept after a later good reload: it is history, not health).
        self.test_report: TestReport | None = None
        self.last_rejected: dict[str, str | None] | None = None
        self.last_attempt_at: float | None = None
        self._lock = asyncio.Lock()
        self.listeners: list = []  # callables(ReloadStatus), e.g. the metrics

    def reload(self) -> ReloadStatus:
        """Build and swap in a new snapshot (blocking); keep the old one on any failure."""
        rejected: str | None = None  # the refused edit's revision, when it got that far
        self.last_attempt_at = time.time()
        try:
            snapshot, report = build_snapshot(self.policy_dir, self.catalog_path,
                                              self.tests_dir)
            if not report.ok:
                rejected = snapshot.revision
                raise ReloadError(f"policy tests failed:\n{report.summary()}")
        except ReloadError as e:
            status = ReloadStatus("failed", self.revision, str(e))
        except Exception as e:  # anything unexpected also keeps the last good snapshot
            log.exception("policy reload crashed")
            status = ReloadStatus("failed", self.revision, f"internal error: {e!r}")
        else:
            if self.snapshot is not None and snapshot.revision == self.snapshot.revision:
                status = ReloadStatus("unchanged", snapshot.revision)
            else:
                self.snapshot = snapshot  # one reference swap: readers see old or new, whole
                self.test_report = report
                self.loaded_at = time.time()
                status = ReloadStatus("loaded", snapshot.revision)
        if status.result == "failed":
            self.last_rejected = {"at": _iso(self.last_attempt_at), "revision": rejected,
                                  "reason": status.error}
        self._record(status)
        return status

    def _record(self, status: ReloadStatus) -> None:
        if status.result == "failed":
            self.reloads_failed += 1
            if status.error != self.last_error:
                log.error("policy reload failed, still serving revision %s: %s",
                          status.revision, status.error)
            self.last_error = status.error
        else:
            if status.result == "loaded":
                self.reloads_ok += 1
                log.info("policy revision %s loaded from %s", status.revision, self.policy_dir)
            self.last_error = None
        for listener in self.listeners:
            listener(status)

    @property
    def revision(self) -> str | None:
        return self.snapshot.revision if self.snapshot else None

    def status(self) -> dict[str, Any]:
        """What `GET /v1/policy` answers: the serving revision, when and from which files it
        loaded, its test result, and the latest refused edit with its reason."""
        snap, report = self.snapshot, self.test_report
        source = snap.source if snap is not None else None
        return {
            "policy_revision": self.revision,
            "loaded_at": _iso(self.loaded_at),
            "policy_dir": str(self.policy_dir),
            "version": source.version if source is not None else None,
            "tests_dir": str(self.tests_dir or self.policy_dir / TESTS_DIR),
            "tests_version": source.tests_version if source is not None else None,
            "files": [{"path": name, "sha256": digest} for name, digest in source.files]
                     if source is not None else [],
            "catalog": {"path": str(self.catalog_path),
                        "environments": list(snap.environments) if snap else [],
                        "tools": len(snap.tools) if snap else 0},
            "rules": len(source.rules) if source is not None else 0,
            "context_rules": len(source.context_rules) if source is not None else 0,
            "tests": {"passed": report.passed, "failed": len(report.failures)}
                     if report is not None else None,
            "last_reload_at": _iso(self.last_attempt_at),
            "reload_failing": self.last_error is not None,
            "last_reload_error": self.last_error,
            "last_rejected": self.last_rejected,
            "reloads": {"loaded": self.reloads_ok, "failed": self.reloads_failed},
        }

    async def areload(self) -> ReloadStatus:
        """Reload in a worker thread, one at a time, so the event loop keeps answering."""
        async with self._lock:
            return await asyncio.to_thread(self.reload)

    async def watch(self, stop: asyncio.Event, *, debounce_ms: int, poll_s: float) -> None:
        """Reload on file events in the policy, tests and catalog folders, and every `poll_s`
        anyway (a missed event, or a folder that did not exist yet, costs at most that long)."""
        folders = [self.policy_dir, self.catalog_path.parent]
        if self.tests_dir is not None:
            folders.append(self.tests_dir)
        while not stop.is_set():
            existing = [f for f in folders if f.exists()]
            try:
                if not existing:
                    raise FileNotFoundError(folders[0])
                async for _changes in awatch(
                        *existing, debounce=debounce_ms, step=min(50, debounce_ms),
                        stop_event=stop, rust_timeout=int(poll_s * 1000),
                        yield_on_timeout=True, recursive=True):
                    await self.areload()
                    if [f for f in folders if f.exists()] != existing:
                        break  # a folder came or went: re-arm the watcher on what exists
            except (FileNotFoundError, OSError) as e:
                log.warning("cannot watch the policy folders (%s); polling", e)
                await self.areload()
                try:
                    await asyncio.wait_for(stop.wait(), timeout=poll_s)
                except TimeoutError:
                    pass
