"""Platform operations: capabilities, environments, maintenance windows, databases, datasets,
migrations (asynchronous) and task status."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from agentchat.sandbox.access import allowed
from agentchat.sandbox.context import OpContext, OpError, Reply, not_found
from agentchat.sandbox.data import ENV_IDS, ENVIRONMENTS, ROW_FACTOR, iso, now_utc
from agentchat.sandbox.search import best_matches


def show_capabilities(ctx: OpContext, args: dict[str, Any]) -> Reply:
    tools = [{
        "name": t.name, "description": t.description.model_dump(), "risk": t.risk,
        "risk_level": t.risk_level,
        # Where this user may run it (the environment-free tools: every env or none).
        "allowed_envs": [e for e in ENV_IDS if allowed(ctx.user, t.risk, e)],
    } for t in ctx.catalog.tools]
    return Reply({"tools": tools, "user": ctx.user.sub, "roles": ctx.user.role_strings()})


def list_environments(ctx: OpContext, args: dict[str, Any]) -> Reply:
    items = []
    for env in ENVIRONMENTS:
        deployed = [d for d in ctx.world.dashboards.values() if env["id"] in d["envs"]]
        failing = sum(d["envs"][env["id"]]["health"]["status"] == "failing" for d in deployed)
        items.append({**env, "status": "degraded" if failing else "healthy",
                      "dashboards": len(deployed),
                      "maintenance": ctx.world.active_maintenance(env["id"]) is not None})
    return Reply({"items": items})


def list_maintenance_events(ctx: OpContext, args: dict[str, Any]) -> Reply:
    envs = ctx.envs(args.get("env_id"))
    return Reply({"items": [dict(e) for e in ctx.world.maintenance.values()
                            if e["env_id"] in envs]})


def start_maintenance(ctx: OpContext, args: dict[str, Any]) -> Reply:
    env = args["env_id"]
    active = ctx.world.active_maintenance(env)
    if active is not None:
        raise OpError(422, f"maintenance window {active['id']} is already active in {env}")
    now = now_utc()
    event = {"id": ctx.world.next_id(ctx.world.maintenance), "env_id": env, "status": "active",
             "reason": args.get("reason", ""), "starts_at": iso(now),
             "ends_at": iso(now + timedelta(minutes=args.get("duration_minutes", 60)))}
    ctx.world.maintenance[event["id"]] = event
    return Reply(dict(event), status=201)


def end_maintenance(ctx: OpContext, args: dict[str, Any]) -> Reply:
    event = ctx.world.maintenance.get(args["event_id"])
    if event is None or event["env_id"] != args["env_id"]:
        raise not_found(f"maintenance window {args['event_id']} in {args['env_id']}")
    if event["status"] != "active":
        raise OpError(422, f"maintenance window {event['id']} is {event['status']}, not active")
    event.update(status="ended", ends_at=iso(now_utc()))
    return Reply(dict(event))


def list_databases(ctx: OpContext, args: dict[str, Any]) -> Reply:
    return Reply({"env_id": args["env_id"], "items": [
        {"id": d["id"], "name": d["name"], "backend": d["backend"], "tables": len(d["tables"])}
        for d in ctx.world.databases.values()]})


def superset_explore_database(ctx: OpContext, args: dict[str, Any]) -> Reply:
    db = ctx.world.databases.get(args["database_id"])
    if db is None:
        raise not_found(f"database {args['database_id']} in {args['env_id']}")
    factor = ROW_FACTOR[args["env_id"]]
    tables = [{"name": name, "columns": list(t["columns"]), "rows": t["rows"] * factor}
              for name, t in db["tables"].items()]
    return Reply({"id": db["id"], "name": db["name"], "backend": db["backend"],
                  "env_id": args["env_id"], "tables": tables})


def _dataset_view(ctx: OpContext, ds: dict[str, Any], env: str | None) -> dict[str, Any]:
    db = ctx.world.databases[ds["database_id"]]
    view = {k: v for k, v in ds.items() if k != "refreshed_at"}
    view.update(database=db["name"], columns=list(db["tables"][ds["table"]]["columns"]))
    if env is not None:
        view.update(env_id=env, refreshed_at=ds["refreshed_at"].get(env))
    return view


def search_datasets(ctx: OpContext, args: dict[str, Any]) -> Reply:
    env = args.get("env_id")
    dbs = ctx.world.databases
    found = best_matches(ctx.world.datasets.values(), args.get("query"), lambda d: (
        d["name"].replace("_", " "), d["table"].replace("_", " "), d["description"],
        d["description_en"], dbs[d["database_id"]]["name"]))
    items = [_dataset_view(ctx, d, env) for d in found]
    return Reply({"items": items, "total": len(items), "query": args.get("query"),
                  "env_id": env})


def refresh_dataset(ctx: OpContext, args: dict[str, Any]) -> Reply:
    ds = ctx.world.datasets.get(args["dataset_id"])
    if ds is None:
        raise not_found(f"dataset {args['dataset_id']} in {args['env_id']}")
    ds["refreshed_at"][args["env_id"]] = iso(now_utc())
    return Reply(_dataset_view(ctx, ds, args["env_id"]))


def start_migration(ctx: OpContext, args: dict[str, Any]) -> Reply:
    source, target = args["source_env"], args["target_env"]
    if source == target:
        raise OpError(422, "source_env and target_env must differ")
    dash = ctx.world.dashboards.get(args["dashboard_id"])
    if dash is None or source not in dash["envs"]:
        raise not_found(f"dashboard {args['dashboard_id']} in {source}")
    mig_id = ctx.world.next_id(ctx.world.migrations)
    task = ctx.world.new_task("migration", target, {"migration_id": mig_id})
    ctx.world.migrations[mig_id] = {
        "id": mig_id, "dashboard_id": dash["id"], "source_env": source, "target_env": target,
        "status": "queued", "task_id": task.task_id, "created_at": task.created_at}
    return Reply({"task_id": task.task_id, "status": "queued", "migration_id": mig_id,
                  "dashboard_id": dash["id"], "source_env": source, "target_env": target},
                 status=202)


def list_migrations(ctx: OpContext, args: dict[str, Any]) -> Reply:
    envs = ctx.envs(args.get("env_id"))
    items = []
    for mig in ctx.world.migrations.values():
        if mig["source_env"] in envs or mig["target_env"] in envs:
            task = ctx.world.tasks[mig["task_id"]]
            items.append({**mig, "status": ctx.world.task_view(task)["status"]})
    return Reply({"items": items})


def get_task_status(ctx: OpContext, args: dict[str, Any]) -> Reply:
    task = ctx.world.tasks.get(args["task_id"])
    # Another environment's task is not revealed as existing.
    if task is None or not allowed(ctx.user, "read", task.env_id):
        raise not_found(f"task {args['task_id']}")
    return Reply(ctx.world.task_view(task))


OPERATIONS: dict[str, Callable[[OpContext, dict[str, Any]], Reply]] = {
    "show_capabilities": show_capabilities,
    "list_environments": list_environments,
    "list_maintenance_events": list_maintenance_events,
    "start_maintenance": start_maintenance,
    "end_maintenance": end_maintenance,
    "list_databases": list_databases,
    "superset_explore_database": superset_explore_database,
    "search_datasets": search_datasets,
    "refresh_dataset": refresh_dataset,
    "start_migration": start_migration,
    "list_migrations": list_migrations,
    "get_task_status": get_task_status,
}
