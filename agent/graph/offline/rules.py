"""What the offline planner understands: intents, environments and ids in Russian and English.

The planner is a stand-in for a real model, so its grammar is deliberately small: one tool
call per clause ("задеплой 42 в прод и удали 7 на ss-dev" is two clauses), environments and
ids from the words, and the context (UIContext, selected environment) for "этот дашборд".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ENV_WORDS: dict[str, str] = {
    "ss-dev": "ss-dev", "dev": "ss-dev", "дев": "ss-dev", "разработк": "ss-dev",
    "ss-stage": "ss-stage", "stage": "ss-stage", "staging": "ss-stage", "стейдж": "ss-stage",
    "стейджинг": "ss-stage", "тест": "ss-stage",
    "prod": "prod", "production": "prod", "прод": "prod", "продакшн": "prod",
    "продакшен": "prod", "продуктив": "prod", "бой": "prod",
}
_ENV_RE = re.compile(
    r"(?<![\w-])(ss-dev|ss-stage|production|staging|prod|stage|dev|продакшн|продакшен|"
    r"продуктив\w*|прод\w*|стейдж\w*|дев|тест\w*|бой\w*|разработк\w*)(?![\w-])"
)
_CONTEXT_RE = re.compile(r"\b(этот|эту|это|этого|этом|текущ\w*|данн\w+|this|current|it)\b")
_SPLIT_RE = re.compile(r"\s*(?:;|\.\s|,?\s+(?:и|а потом|потом|затем|then|and|also)\s+)\s*")
_NUM_RE = re.compile(r"(?<![\w-])#?(\d{1,9})(?![\w-])")
_TASK_RE = re.compile(r"\b(task-[0-9a-z-]+|[0-9a-f]{8}-[0-9a-f-]{27})\b")
CYRILLIC = re.compile(r"[а-яё]", re.IGNORECASE)

# (tool, pattern that must match, pattern that must also match or None), checked in order.
INTENTS: list[tuple[str, str, str | None]] = [
    ("delete_dashboard", r"удал|снеси|снести|убери|delete|remove|drop", None),
    ("start_migration", r"перенес|перенос|мигрир|migrat|move\b|promote|скопиру", None),
    ("deploy_dashboard", r"деплой|задеплой|выкат|разверн|deploy|roll ?out|release|publish|опублик",
     None),
    ("end_maintenance", r"заверш|законч|останов|выключ|\bend\b|finish|stop|close",
     r"обслуж|техработ|maintenance"),
    ("start_maintenance", r"начн|начать|запуст|включ|start|begin|open|объяв",
     r"обслуж|техработ|maintenance"),
    ("list_maintenance_events", r"обслуж|техработ|maintenance|downtime", None),
    ("export_config", r"экспорт|выгруз|export|backup|бэкап", None),
    ("get_task_status", r"задач|task|job|прогресс|progress", None),
    ("refresh_dataset", r"обнови|обновить|refresh|reload|перечита", r"датасет|dataset|набор"),
    ("superset_explore_database", r"исследу|explore|таблиц|tables|колонк|columns|схем", None),
    ("list_databases", r"\bбаз[аыу]?\b|\bбд\b|databases?|подключени", None),
    ("search_datasets", r"датасет|dataset|набор\w* данных", None),
    ("list_migrations", r"миграци|migrations", None),
    ("get_health_summary", r"здоров|состояни|health|ошибк|проблем|работает|broken|errors|статус",
     None),
    ("list_environments", r"окружени|environments?|стенд|\bсреды\b|\bсред\b", None),
    ("search_dashboards", r"дашборд|dashboard|отч[её]т|report|панел|найди|найти|find|search|покажи"
     r"|show|list", None),
    ("show_capabilities", r"умеешь|можешь|помощь|помоги|возможност|справк|help|capabilit|"
     r"what can you", None),
]
_COMPILED = [(t, re.compile(a), re.compile(b) if b else None) for t, a, b in INTENTS]

STOPWORDS = set(
    "про по о об в во на из с со для и или все всё мне покажи найди найти поищи дашборд дашборды "
    "дашбордов дашборда отчёт отчет отчёты отчеты пожалуйста please find search show me the a an "
    "for about of in on all dashboards dashboard reports report with list какие есть"
    .split()
)


@dataclass(frozen=True)
class TurnContext:
    """What the agent tells the model about this turn (never stored)."""

    env_id: str | None = None
    uicontext: dict[str, Any] | None = None
    prefetched: dict[str, Any] | None = None


def normalize(text: str) -> str:
    return text.lower().replace("ё", "е")


def is_russian(text: str) -> bool:
    return bool(CYRILLIC.search(text))


def envs_in(text: str) -> list[str]:
    out = []
    for m in _ENV_RE.finditer(normalize(text)):
        word = m.group(1)
        env = ENV_WORDS.get(word) or next(
            (v for k, v in ENV_WORDS.items() if word.startswith(k) and len(k) >= 3), None)
        if env:
            out.append(env)
    return out


def refers_to_context(text: str) -> bool:
    return bool(_CONTEXT_RE.search(normalize(text)))


def numbers_in(text: str) -> list[int]:
    return [int(n) for n in _NUM_RE.findall(text)]


def clauses(text: str) -> list[str]:
    return [c for c in _SPLIT_RE.split(text.strip()) if c]


def intent_of(clause: str, available: set[str]) -> str | None:
    low = normalize(clause)
    for tool, first, second in _COMPILED:
        if tool in available and first.search(low) and (second is None or second.search(low)):
            return tool
    return None


def search_words(clause: str) -> str:
    words = re.findall(r"[\w-]+", normalize(clause))
    keep = [w for w in words if w not in STOPWORDS and not w.isdigit()
            and not envs_in(w) and len(w) > 2]
    return " ".join(keep[:6])


def plan_call(tool: str, clause: str, ctx: TurnContext,
              schema: dict[str, Any]) -> dict[str, Any] | None:
    """Arguments for one call, or None when the clause lacks what the tool requires."""
    props: dict[str, Any] = schema.get("properties", {})
    required: list[str] = schema.get("required", [])
    ui = ctx.uicontext or {}
    use_context = refers_to_context(clause) or not numbers_in(clause)
    envs = envs_in(clause)
    env = envs[-1] if envs else (
        ui.get("envId") if refers_to_context(clause) and ui.get("envId") else ctx.env_id
    ) or ui.get("envId")
    nums = numbers_in(clause)
    args: dict[str, Any] = {}
    for name in props:
        if name == "env_id" and env:
            args[name] = env
        elif name == "target_env" and envs:
            args[name] = envs[-1]
        elif name == "source_env":
            args[name] = envs[0] if len(envs) > 1 else (ctx.env_id or ui.get("envId") or "ss-dev")
        elif name == "dashboard_id":
            if nums:
                args[name] = nums[0]
            elif use_context and ui.get("objectType") == "dashboard" and ui.get("objectId"):
                args[name] = int(ui["objectId"])
        elif name == "dataset_id":
            if nums:
                args[name] = nums[0]
            elif ui.get("objectType") == "dataset" and ui.get("objectId"):
                args[name] = int(ui["objectId"])
        elif name in ("database_id", "event_id") and nums:
            args[name] = nums[0]
        elif name == "task_id":
            m = _TASK_RE.search(normalize(clause))
            if m:
                args[name] = m.group(1)
        elif name == "query":
            words = search_words(clause)
            if words:
                args[name] = words
        elif name == "reason":
            args[name] = clause[:200]
    if "env_id" in required and "env_id" not in args:
        args["env_id"] = "ss-dev"
    if "target_env" in required and "target_env" not in args:
        return None
    if any(r not in args for r in required):
        return None
    return args
