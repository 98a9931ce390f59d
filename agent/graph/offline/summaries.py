"""The offline model's summary of each tool's result (answers.py picks one by the tool): a
list shows up to LIST_ITEMS items and says how many more; a queued task says what was queued
and how to follow it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentchat.agent.graph.offline.said import LIST_ITEMS, Said, as_dict, capitalized
from agentchat.words import clean_text

# -- results, per tool -----------------------------------------------------------------------

def _more(n: int, shown: int, said: Said) -> str:
    rest = n - shown
    return said.t(f"\n…и ещё {rest}.", f"\n…and {rest} more.") if rest > 0 else ""


def _lines(items: Sequence[Any], line: Callable[[Mapping[str, Any]], str], said: Said) -> str:
    shown = [i for i in items if isinstance(i, dict)][:LIST_ITEMS]
    return "\n".join("- " + line(i) for i in shown) + _more(len(items), len(shown), said)


def _search_dashboards(data: Mapping[str, Any], said: Said) -> str:
    items = data.get("items") or []
    env = said.env(data.get("env_id") or "")
    query = data.get("query")
    q = (said.t(f" по запросу {said.name(query)}", f" for {said.name(query)}")
         if query else "")
    where = said.t(f" в {env}", f" in {env}") if env else ""
    if not items:
        return said.t(f"Дашбордов{q}{where} не нашёл. Попробуйте другие слова.",
                      f"I found no dashboards{q}{where}. Try other words.")
    found = said.count(len(items), ("дашборд", "дашборда", "дашбордов"),
                       ("dashboard", "dashboards"))
    head = said.t(f"Нашёл {found}{q}{where}:", f"I found {found}{q}{where}:")
    return head + "\n" + _lines(items, lambda i: _dashboard_line(i, said), said)


def _dashboard_line(i: Mapping[str, Any], said: Said) -> str:
    envs = as_dict(i.get("envs"))
    where = ", ".join(f"{said.env(e)} {clean_text(v.get('version', ''))[:20]}".strip()
                      for e, v in envs.items() if isinstance(v, dict))
    owner = clean_text(i.get("owner") or "")[:40]
    extra = [said.t(f"владелец {owner}", f"owner {owner}")] if owner else []
    if where:
        extra.append(where)
    return said.label(i.get("id"), i, "title") + (f" — {'; '.join(extra)}" if extra else "")


def _get_dashboard(data: Mapping[str, Any], said: Said) -> str:
    envs = as_dict(data.get("envs"))
    parts = []
    for env, v in envs.items():
        if isinstance(v, dict):
            health = as_dict(v.get("health"))
            parts.append(said.t(
                f"{said.env(env)} — версия {clean_text(v.get('version', ''))[:20]}, "
                f"{said.status(health.get('status'))}",
                f"{said.env(env)} — version {clean_text(v.get('version', ''))[:20]}, "
                f"{said.status(health.get('status'))}"))
    owner = clean_text(data.get("owner") or "")[:40]
    label = said.label(data.get("id"), data, "title")
    head = said.t(f"Дашборд {label}" + (f", владелец {owner}." if owner else "."),
                  f"Dashboard {label}" + (f", owner {owner}." if owner else "."))
    if not parts:
        return head
    return head + said.t(" По окружениям:\n", " By environment:\n") + "\n".join(
        f"- {p}" for p in parts)


def _health(data: Mapping[str, Any], said: Said) -> str:
    env = said.env(data.get("env_id") or "")
    if data.get("dashboard_id") is not None:
        label = said.label(data.get("dashboard_id"), data, "title")
        return said.t(
            f"Дашборд {label} в {env}: {said.status(data.get('status'))}; ошибок за сутки "
            f"{data.get('errors_24h', 0)}, задержка p95 {data.get('p95_latency_ms', 0)} мс, "
            f"данные обновлены {data.get('data_freshness_min', 0)} мин назад.",
            f"Dashboard {label} in {env}: {said.status(data.get('status'))}; "
            f"{data.get('errors_24h', 0)} errors in 24 h, p95 latency "
            f"{data.get('p95_latency_ms', 0)} ms, data refreshed "
            f"{data.get('data_freshness_min', 0)} min ago.")
    counts = as_dict(data.get("dashboards"))
    problems = [p for p in data.get("problems") or [] if isinstance(p, dict)]
    head = said.t(
        f"Состояние {env}: {said.status(data.get('status'))}. Дашбордов в порядке: "
        f"{counts.get('healthy', 0)}, с проблемами: {counts.get('degraded', 0)}, не работают: "
        f"{counts.get('failing', 0)}; ошибок за сутки: {data.get('errors_24h', 0)}.",
        f"Health of {env}: {said.status(data.get('status'))}. Dashboards healthy: "
        f"{counts.get('healthy', 0)}, degraded: {counts.get('degraded', 0)}, failing: "
        f"{counts.get('failing', 0)}; {data.get('errors_24h', 0)} errors in 24 h.")
    if data.get("maintenance_active"):
        head += said.t(" Сейчас идёт обслуживание.", " Maintenance is under way.")
    if not problems:
        return head
    return head + said.t(" Проблемные:\n", " With problems:\n") + _lines(
        problems, lambda p: f"{said.label(p.get('dashboard_id'), p, 'title')}: "
                            f"{said.status(p.get('status'))}", said)


def _export(data: Mapping[str, Any], said: Said) -> str:
    env = said.env(data.get("env_id") or "")
    label = said.known("dashboard", data.get("dashboard_id"))
    name = clean_text(data.get("filename") or "")[:80]
    return said.t(f"Конфигурация дашборда {label} из {env} выгружена (YAML): файл {name}.",
                  f"The configuration of dashboard {label} from {env} is exported (YAML): "
                  f"file {name}.")


def _queued(data: Mapping[str, Any], said: Said) -> str:
    task = clean_text(data.get("task_id") or "")[:64]
    status = said.status(data.get("status") or "queued")
    dash = said.known("dashboard", data.get("dashboard_id"))
    if data.get("migration_id") is not None or data.get("source_env"):
        what = said.t(
            f"перенос дашборда {dash} из {said.env(data.get('source_env'))} в "
            f"{said.env(data.get('target_env'))}",
            f"the migration of dashboard {dash} from {said.env(data.get('source_env'))} to "
            f"{said.env(data.get('target_env'))}")
    else:
        version = clean_text(data.get("version") or "")[:40]
        what = said.t(f"деплой дашборда {dash} версии {version} в {said.env(data.get('env_id'))}",
                      f"the deploy of dashboard {dash}, version {version}, to "
                      f"{said.env(data.get('env_id'))}")
    return said.t(f"Поставил в очередь {what}: задача {task}, статус — {status}. Чтобы узнать, "
                  f"как она идёт, спросите «статус задачи {task}».",
                  f"I queued {what}: task {task}, status {status}. To follow it, ask "
                  f"\"status of task {task}\".")


def _task(data: Mapping[str, Any], said: Said) -> str:
    task = clean_text(data.get("task_id") or "")[:64]
    kind = {"deploy": ("деплой", "deploy"), "migration": ("миграция", "migration")}.get(
        str(data.get("kind")), ("задача", "task"))
    env = said.env(data.get("env_id") or "")
    text = said.t(f"Задача {task} ({kind[0]} в {env}): {said.status(data.get('status'))}, "
                  f"готово на {data.get('progress', 0)}%.",
                  f"Task {task} ({kind[1]} to {env}): {said.status(data.get('status'))}, "
                  f"{data.get('progress', 0)}% done.")
    if data.get("error"):
        text += said.t(" Причина ошибки записана в задаче.", " The task records why it failed.")
    return text


def _environments(data: Mapping[str, Any], said: Said) -> str:
    items = data.get("items") or []
    head = said.t(f"Окружения ({len(items)}):", f"Environments ({len(items)}):")
    return head + "\n" + _lines(items, lambda e: said.t(
        f"{said.env(e.get('id'))}: {said.status(e.get('status'))}, дашбордов "
        f"{e.get('dashboards', 0)}" + (", идёт обслуживание" if e.get("maintenance") else ""),
        f"{said.env(e.get('id'))}: {said.status(e.get('status'))}, "
        f"{e.get('dashboards', 0)} dashboards"
        + (", maintenance under way" if e.get("maintenance") else "")), said)


def _maintenance_list(data: Mapping[str, Any], said: Said) -> str:
    items = data.get("items") or []
    if not items:
        return said.t("Окон обслуживания нет.", "There are no maintenance windows.")
    head = said.t(f"Окна обслуживания ({len(items)}):", f"Maintenance windows ({len(items)}):")
    return head + "\n" + _lines(items, lambda e: said.t(
        f"№{e.get('id')} в {said.env(e.get('env_id'))}: {said.status(e.get('status'))}, "
        f"с {said.when(e.get('starts_at'))} до {said.when(e.get('ends_at'))}"
        + (f", причина {said.name(e['reason'])}" if e.get("reason") else ""),
        f"#{e.get('id')} in {said.env(e.get('env_id'))}: {said.status(e.get('status'))}, "
        f"from {said.when(e.get('starts_at'))} to {said.when(e.get('ends_at'))}"
        + (f", reason {said.name(e['reason'])}" if e.get("reason") else "")), said)


def _maintenance_started(data: Mapping[str, Any], said: Said) -> str:
    env = said.env(data.get("env_id"))
    return said.t(f"Обслуживание в {env} началось: окно №{data.get('id')} до "
                  f"{said.when(data.get('ends_at'))}. Пользователи видят баннер.",
                  f"Maintenance in {env} has started: window #{data.get('id')} until "
                  f"{said.when(data.get('ends_at'))}. Users see the banner.")


def _maintenance_ended(data: Mapping[str, Any], said: Said) -> str:
    env = said.env(data.get("env_id"))
    return said.t(f"Окно обслуживания №{data.get('id')} в {env} завершено.",
                  f"Maintenance window #{data.get('id')} in {env} has ended.")


def _databases(data: Mapping[str, Any], said: Said) -> str:
    items = data.get("items") or []
    env = said.env(data.get("env_id") or "")
    if not items:
        return said.t(f"В {env} нет подключённых баз.", f"No databases are connected in {env}.")
    head = said.t(f"Базы данных в {env} ({len(items)}):", f"Databases in {env} ({len(items)}):")
    return head + "\n" + _lines(items, lambda d: said.t(
        f"{said.label(d.get('id'), d, 'name')}, {clean_text(d.get('backend'))[:30]}, таблиц "
        f"{d.get('tables', 0)}",
        f"{said.label(d.get('id'), d, 'name')}, {clean_text(d.get('backend'))[:30]}, "
        f"{d.get('tables', 0)} tables"), said)


def _explore(data: Mapping[str, Any], said: Said) -> str:
    tables = [t for t in data.get("tables") or [] if isinstance(t, dict)]
    env = said.env(data.get("env_id") or "")
    label = said.label(data.get("id"), data, "name")
    count = said.count(len(tables), ("таблица", "таблицы", "таблиц"), ("table", "tables"))
    head = said.t(f"В базе {label} в {env} {count}:", f"Database {label} in {env} has {count}:")
    return head + "\n" + _lines(tables, lambda t: said.t(
        f"{said.name(t.get('name'))}: колонок {len(t.get('columns') or [])}, строк "
        f"{said.number(t.get('rows', 0))}",
        f"{said.name(t.get('name'))}: {len(t.get('columns') or [])} columns, "
        f"{said.number(t.get('rows', 0))} rows"), said)


def _datasets(data: Mapping[str, Any], said: Said) -> str:
    items = data.get("items") or []
    query = data.get("query")
    q = said.t(f" по запросу {said.name(query)}", f" for {said.name(query)}") if query else ""
    if not items:
        return said.t(f"Датасетов{q} не нашёл.", f"I found no datasets{q}.")
    found = said.count(len(items), ("датасет", "датасета", "датасетов"), ("dataset", "datasets"))
    head = said.t(f"Нашёл {found}{q}:", f"I found {found}{q}:")
    return head + "\n" + _lines(items, lambda d: said.label(d.get("id"), d, "name") + (
        f" — {said.name(d.get('description_en') if said.lang == 'en' and d.get('description_en') else d.get('description'))}"  # noqa: E501
        if d.get("description") else ""), said)


def _refreshed(data: Mapping[str, Any], said: Said) -> str:
    label = said.label(data.get("id"), data, "name")
    env = said.env(data.get("env_id") or "")
    return said.t(f"Датасет {label} в {env} обновлён: схема перечитана, кэш сброшен.",
                  f"Dataset {label} in {env} is refreshed: schema re-read, cache cleared.")


def _migrations(data: Mapping[str, Any], said: Said) -> str:
    items = data.get("items") or []
    if not items:
        return said.t("Миграций нет.", "There are no migrations.")
    head = said.t(f"Миграции ({len(items)}):", f"Migrations ({len(items)}):")
    return head + "\n" + _lines(items, lambda m: said.t(
        f"№{m.get('id')}: дашборд {said.known('dashboard', m.get('dashboard_id'))} из "
        f"{said.env(m.get('source_env'))} в {said.env(m.get('target_env'))} — "
        f"{said.status(m.get('status'))}",
        f"#{m.get('id')}: dashboard {said.known('dashboard', m.get('dashboard_id'))} from "
        f"{said.env(m.get('source_env'))} to {said.env(m.get('target_env'))} — "
        f"{said.status(m.get('status'))}"), said)


def _deleted(data: Mapping[str, Any], said: Said) -> str:
    label = said.known("dashboard", data.get("dashboard_id"))
    env = said.env(data.get("env_id"))
    left = ", ".join(said.env(e) for e in data.get("remaining_envs") or [])
    rest = said.t(f" Он остался в: {left}.", f" It remains in: {left}.") if left else \
        said.t(" Больше его нет ни в одном окружении.", " It is now in no environment.")
    return said.t(f"Дашборд {label} удалён из {env}.", f"Dashboard {label} is deleted from "
                  f"{env}.") + rest


def _capabilities(data: Mapping[str, Any], said: Said) -> str:
    lines = [f"- {clean_text(t['description'][said.lang])}" for t in data.get("tools") or []
             if isinstance(t, dict) and isinstance(t.get("description"), dict)
             and t.get("allowed_envs") and t["description"].get(said.lang)]
    if data.get("truncated"):  # the list was cut to fit the model's context
        lines.append(said.t("- …и другое: спросите, если нужно что-то конкретное.",
                            "- …and more: ask if you need something specific."))
    head = said.t("Вот что я могу для вас сделать:", "Here is what I can do for you:")
    return "\n".join([head, *lines])


def generic_list(items: Sequence[Any], tool: str | None, said: Said) -> str:
    head = said.t(f"Результат действия {said.title(tool)}: найдено {len(items)}.",
                  f"{capitalized(said.title(tool))}: {len(items)} found.")
    if not items:
        return head
    return head + "\n" + _lines(items, lambda i: said.label(i.get("id"), i, "title", "name",
                                                           *names_of(i)), said)


def generic_object(data: Mapping[str, Any], tool: str | None, said: Said) -> str:
    """One object another team's tool told about: its name and number."""
    oid = data.get("id", next((v for k, v in data.items() if str(k).endswith("_id")
                               and isinstance(v, int)), None))
    label = said.label(oid, data, "title", "name", *names_of(data))
    return said.t(f"Результат действия {said.title(tool)}: {label}.",
                  f"{capitalized(said.title(tool))}: {label}.")


def names_of(item: Mapping[str, Any]) -> list[str]:
    """Its fields that name it, as another team calls them (`dashboard_title`, `slice_name`)."""
    return [k for k in item if isinstance(k, str) and k.endswith(("_title", "_name"))]


SUMMARIES: dict[str, Callable[[Mapping[str, Any], Said], str]] = {
    "show_capabilities": _capabilities,
    "list_environments": _environments,
    "search_dashboards": _search_dashboards,
    "get_dashboard": _get_dashboard,
    "get_health_summary": _health,
    "export_config": _export,
    "deploy_dashboard": _queued,
    "start_migration": _queued,
    "delete_dashboard": _deleted,
    "list_maintenance_events": _maintenance_list,
    "start_maintenance": _maintenance_started,
    "end_maintenance": _maintenance_ended,
    "list_databases": _databases,
    "superset_explore_database": _explore,
    "search_datasets": _datasets,
    "refresh_dataset": _refreshed,
    "list_migrations": _migrations,
    "get_task_status": _task,
}
