"""Dashboard operations: search, summary, health, export, deploy (asynchronous) and delete."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from agentchat.sandbox.context import OpContext, OpError, Reply, not_found
from agentchat.sandbox.data import ENV_IDS
from agentchat.sandbox.search import best_matches


def _dashboard(ctx: OpContext, dashboard_id: int, env_id: str | None = None) -> dict[str, Any]:
    dash = ctx.world.dashboards.get(dashboard_id)
    where = ctx.envs(env_id)
    if dash is None or not any(e in dash["envs"] for e in where):
        suffix = f" in {env_id}" if env_id else ""
        raise not_found(f"dashboard {dashboard_id}{suffix}")
    return dash


def _view(dash: dict[str, Any], envs: list[str]) -> dict[str, Any]:
    return {
        "id": dash["id"], "title": dash["title"], "title_en": dash["title_en"],
        "owner": dash["owner"],
        "envs": {e: dict(dash["envs"][e]) for e in envs if e in dash["envs"]},
    }


def search_dashboards(ctx: OpContext, args: dict[str, Any]) -> Reply:
    envs = ctx.envs(args.get("env_id"))
    present = [d for d in ctx.world.dashboards.values() if any(e in d["envs"] for e in envs)]
    found = best_matches(present, args.get("query"), lambda d: (d["title"], d["title_en"]))
    items = [_view(d, envs) for d in found]
    return Reply({"items": items, "total": len(items), "query": args.get("query"),
                  "env_id": args.get("env_id")})


def get_dashboard(ctx: OpContext, args: dict[str, Any]) -> Reply:
    dash = _dashboard(ctx, args["dashboard_id"], args.get("env_id"))
    view = _view(dash, ctx.envs(args.get("env_id")))
    datasets = [ctx.world.datasets[i] for i in dash["datasets"] if i in ctx.world.datasets]
    view.update(charts=dash["charts"],
                datasets=[{"id": d["id"], "name": d["name"]} for d in datasets])
    return Reply(view)


def get_health_summary(ctx: OpContext, args: dict[str, Any]) -> Reply:
    env = args["env_id"]
    if "dashboard_id" in args:
        dash = _dashboard(ctx, args["dashboard_id"], env)
        entry = dash["envs"][env]
        return Reply({"env_id": env, "dashboard_id": dash["id"], "title": dash["title"],
                      "title_en": dash["title_en"], "version": entry["version"],
                      **entry["health"]})
    deployed = [d for d in ctx.world.dashboards.values() if env in d["envs"]]
    counts = {"healthy": 0, "degraded": 0, "failing": 0}
    problems = []
    for d in deployed:
        health = d["envs"][env]["health"]
        counts[health["status"]] += 1
        if health["status"] != "healthy":
            problems.append({"dashboard_id": d["id"], "title": d["title"],
                             "title_en": d["title_en"], **health})
    status = "failing" if counts["failing"] > 2 else "degraded" if problems else "healthy"
    latencies = sorted(d["envs"][env]["health"]["p95_latency_ms"] for d in deployed) or [0]
    return Reply({
        "env_id": env, "status": status, "dashboards": counts,
        "errors_24h": sum(p["errors_24h"] for p in problems),
        "p95_latency_ms": latencies[int(0.95 * (len(latencies) - 1))],
        "maintenance_active": ctx.world.active_maintenance(env) is not None,
        "problems": problems,
    })


def export_config(ctx: OpContext, args: dict[str, Any]) -> Reply:
    env = args["env_id"]
    dash = _dashboard(ctx, args["dashboard_id"], env)
    datasets = [ctx.world.datasets[i] for i in dash["datasets"] if i in ctx.world.datasets]
    config = {
        "dashboard_title": dash["title"], "dashboard_title_en": dash["title_en"],
        "uuid": f"00000000-0000-4000-8000-{dash['id']:012d}",
        "version": dash["envs"][env]["version"],
        "owner": dash["owner"],
        "position": {f"CHART-{n}": {"type": "CHART", "width": 4} for n in range(dash["charts"])},
        "datasets": [{"name": d["name"], "table": d["table"]} for d in datasets],
    }
    content = yaml.safe_dump(config, allow_unicode=True, sort_keys=False)
    return Reply({"dashboard_id": dash["id"], "env_id": env, "format": "yaml",
                  "filename": f"dashboard_{dash['id']}_{env}.yaml", "content": content})


def _version_key(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split("."))
    except ValueError:
        return (0,)


def deploy_dashboard(ctx: OpContext, args: dict[str, Any]) -> Reply:
    dash = ctx.world.dashboards.get(args["dashboard_id"])
    if dash is None or not dash["envs"]:
        raise not_found(f"dashboard {args['dashboard_id']}")
    # Without a version, deploy the newest one built anywhere (usually ss-dev's).
    latest = max((e["version"] for e in dash["envs"].values()), key=_version_key)
    version = args.get("version") or latest
    known = sorted({e["version"] for e in dash["envs"].values()}, key=_version_key)
    if version not in known:
        raise OpError(422, f"version {version} of dashboard {dash['id']} was never built; "
                           f"known: {', '.join(known)}")
    task = ctx.world.new_task("deploy", args["env_id"],
                              {"dashboard_id": dash["id"], "version": version})
    return Reply({"task_id": task.task_id, "status": "queued", "dashboard_id": dash["id"],
                  "env_id": args["env_id"], "version": version}, status=202)


def delete_dashboard(ctx: OpContext, args: dict[str, Any]) -> Reply:
    env = args["env_id"]
    dash = _dashboard(ctx, args["dashboard_id"], env)
    del dash["envs"][env]
    return Reply({"deleted": True, "dashboard_id": dash["id"], "env_id": env,
                  "remaining_envs": [e for e in ENV_IDS if e in dash["envs"]]})


OPERATIONS: dict[str, Callable[[OpContext, dict[str, Any]], Reply]] = {
    "search_dashboards": search_dashboards,
    "get_dashboard": get_dashboard,
    "get_health_summary": get_health_summary,
    "export_config": export_config,
    "deploy_dashboard": deploy_dashboard,
    "delete_dashboard": delete_dashboard,
}
