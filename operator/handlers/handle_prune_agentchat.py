"""Checkpoint pruning for one AgentChat, due-checked against status.prune.nextRunAt.

The database comes from the spec's Secret reference (key `url`), else the operator's own
DATABASE_URL. A pool is kept per AgentChat between runs and dropped after a failure. The URL
may hold a password: it is never logged, put in status or in an Event.
"""

from __future__ import annotations

import time
from typing import Any

import kopf
import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from opentelemetry import trace

from agentchat.db import create_pool
from agentchat.errors import ErrorCode, LocalError
from agentchat.operator import constants as c
from agentchat.operator import metrics
from agentchat.operator.kube import Kube, KubeError, as_body
from agentchat.operator.pruning import PrunerBusy, Retention, prune
from agentchat.operator.settings import OperatorSettings
from agentchat.operator.spec import AgentChatSpec, effective_spec
from agentchat.operator.status import condition, current_conditions, iso, own_conditions, parse_iso

TRACER = trace.get_tracer("agentchat.operator")


class NoDatabase(LocalError):
    """Neither the spec nor the operator names a database to prune."""


class SchemaNotReady(LocalError):
    """The database is not migrated as far as the pruner needs (the agent migrates it)."""


# The pruner reads migration 8's column and indexes. The operator never migrates: the agent
# does at start (one place with DDL rights), so the operator's database role needs none.
SCHEMA_VERSION = 8


async def handle_prune_agentchat(*, body: kopf.Body, patch: kopf.Patch, retry: int,
                                 memo: kopf.Memo, settings: OperatorSettings,
                                 kube: Kube) -> None:
    now = time.time()
    status = dict(body.get("status") or {})
    prune_status = dict(status.get("prune") or {})
    # An invalid spec prunes by the last good one (the rotate timer reports the error).
    spec, error = effective_spec(body, dev=settings.is_dev)
    if spec is None:
        _conditions(patch, status, False, "InvalidSpec", str(error), now)
        return
    ck = spec.checkpoints
    if not ck.enabled:
        _conditions(patch, status, True, "Disabled", "checkpoint pruning is disabled", now)
        return
    # Due check: status survives restarts; memo covers a status patch not yet seen back.
    due = max(parse_iso(prune_status.get("nextRunAt")) or 0.0, memo.get("prune_next_at", 0.0))
    if now < due:
        return

    failures = int(prune_status.get("failures") or 0)
    who = metrics.resource(body)
    try:
        # A span per due run: its SQL (psycopg's spans, statements only) nests under it.
        with TRACER.start_as_current_span("agentchat.operator.prune",
                                          attributes={"agentchat.resource": who}):
            url = await _database_url(body, spec, settings, kube)
            pool, saver = await _connect(memo, url, settings)
            report = await prune(pool, saver, Retention(
                idle_s=ck.keep_latest_after_idle_hours * 3600,
                inactive_s=ck.delete_inactive_after_days * 86400,
                archived_s=ck.delete_archived_after_days * 86400,
                batch_size=ck.batch_size, pause_ratio=settings.tuning.prune_pause_ratio,
            ), now=now)
    except PrunerBusy as e:
        metrics.PRUNE_RUNS.labels(who, "busy").inc()
        memo["prune_next_at"] = now + ck.interval_seconds
        patch.status["prune"] = {**prune_status, "nextRunAt": iso(now + ck.interval_seconds)}
        _conditions(patch, status, True, "PrunerBusy", str(e), now)
        return
    except (NoDatabase, SchemaNotReady) as e:
        # A configuration gap, not an outage: report it once and look again next interval.
        metrics.PRUNE_RUNS.labels(who, "not_configured").inc()
        metrics.FAILURES.labels(who, "prune", type(e).__name__).inc()
        memo["prune_next_at"] = now + ck.interval_seconds
        patch.status["prune"] = {**prune_status, "nextRunAt": iso(now + ck.interval_seconds)}
        prev = current_conditions(status).get(c.PRUNED) or {}
        reason = type(e).__name__
        if prev.get("reason") != reason or prev.get("message") != str(e):
            kopf.warn(as_body(body), reason="PruneFailed", message=str(e))
        _conditions(patch, status, False, reason, str(e), now)
        return
    except (KubeError, psycopg.Error, OSError) as e:
        await _drop_pool(memo)
        reason, message = _describe(e)
        metrics.PRUNE_RUNS.labels(who, "failed").inc()
        metrics.FAILURES.labels(who, "prune", reason).inc()
        delay = settings.backoff(failures)
        memo["prune_next_at"] = now + delay
        patch.status["prune"] = {**prune_status, "failures": failures + 1,
                                 "lastFailureAt": iso(now), "nextRunAt": iso(now + delay)}
        _conditions(patch, status, False, reason, message, now)
        kopf.warn(as_body(body), reason="PruneFailed", message=f"{message}; retry in {delay:.0f}s")
        raise kopf.TemporaryError(message, delay=delay) from None

    memo["prune_next_at"] = now + ck.interval_seconds
    metrics.PRUNE_RUNS.labels(who, "ok").inc()
    metrics.PRUNED_ROWS.labels(who).inc(report.rows_deleted)
    metrics.PRUNED_THREADS.labels(who, "deleted").inc(report.threads_deleted)
    metrics.PRUNED_THREADS.labels(who, "compacted").inc(report.threads_compacted)
    metrics.LAST_SUCCESS.labels(who, "prune").set(now)
    counts = report.to_status()
    patch.status["prune"] = {**counts, "lastRunAt": iso(now), "failures": 0,
                             "nextRunAt": iso(now + ck.interval_seconds)}
    message = (f"deleted {report.threads_deleted} threads, kept the latest checkpoint of "
               f"{report.threads_compacted}, removed {report.rows_deleted} rows "
               f"({report.checkpoints_deleted} checkpoints) in {report.duration_s:.2f}s; "
               f"skipped {report.skipped_busy} busy")
    _conditions(patch, status, True, "Pruned", message, now)
    kopf.info(as_body(body), reason="Pruned", message=message)


def _describe(e: Exception) -> tuple[str, str]:
    if isinstance(e, KubeError):
        return "KubernetesApiError", str(e)
    if isinstance(e, psycopg.OperationalError | OSError):
        return "StorageUnavailable", (f"{ErrorCode.STORAGE_UNAVAILABLE}: the database is "
                                      f"unreachable ({type(e).__name__})")
    return "PruneFailed", f"{ErrorCode.INTERNAL}: prune failed ({type(e).__name__})"


async def _database_url(body: kopf.Body, spec: AgentChatSpec, settings: OperatorSettings,
                        kube: Kube) -> str:
    ref = spec.database.secret_ref
    if ref is None:
        if not settings.database_url:
            raise NoDatabase("no spec.database.secretRef and no DATABASE_URL for the operator")
        return settings.database_url
    data = await kube.read_secret(body["metadata"]["namespace"], ref.name)
    if not data or not data.get(ref.key):
        raise NoDatabase(f"Secret {ref.name} has no key {ref.key!r}")
    return data[ref.key]


async def _connect(memo: kopf.Memo, url: str,
                   settings: OperatorSettings) -> tuple[Any, AsyncPostgresSaver]:
    if memo.get("pool") is not None and memo.get("pool_url") == url:
        return memo["pool"], memo["saver"]
    await _drop_pool(memo)
    timeout = settings.tuning.database_timeout_s
    # Two connections at least: one holds the pruner's and the threads' locks, the saver
    # uses another.
    pool = create_pool(url, min_size=1, max_size=3, timeout=timeout)
    try:
        await pool.open(wait=True, timeout=timeout)
        async with pool.connection() as conn:
            await _check_schema(conn)
        # The agent ran the saver's setup(); the pruner only deletes.
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
    except BaseException:
        await pool.close()
        raise
    memo.update(pool=pool, pool_url=url, saver=saver)
    return pool, saver


async def _check_schema(conn: Any) -> None:
    try:
        row = await (await conn.execute(
            "SELECT coalesce(max(v), -1) AS v FROM agentchat_migrations")).fetchone()
        version = int(row["v"])
    except psycopg.errors.UndefinedTable:
        version = -1
    if version < SCHEMA_VERSION:
        raise SchemaNotReady(f"the database is at migration {version}, the pruner needs "
                             f"{SCHEMA_VERSION}: start (or upgrade) the agent, which migrates")


async def _drop_pool(memo: kopf.Memo) -> None:
    pool = memo.pop("pool", None)
    memo.pop("saver", None)
    memo.pop("pool_url", None)
    if pool is not None:
        await pool.close()


def _conditions(patch: kopf.Patch, status: dict[str, Any], ok: bool, reason: str,
                message: str, now: float) -> None:
    # Only its own key: the rotate timer rebuilds the list (operator/status.py).
    by_type = own_conditions(status, [condition(c.PRUNED, ok, reason, message, now)], now)
    patch.status["conditionsByType"] = {c.PRUNED: by_type[c.PRUNED]}
