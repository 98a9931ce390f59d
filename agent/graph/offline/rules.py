"""What the offline planner understands: intents, environments and ids in Russian and English.

The planner is a stand-in for a real model, so its grammar is deliberately small: one tool
call per clause ("задеплой 42 в прод и удали 7 на ss-dev" is two clauses), environments and
ids from the words, and the context (UIContext, selected environment) for "этот дашборд".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentchat.agent.graph.prompt import TurnContext

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
# Linear time on any text (README.md, "Safety properties"): a whitespace run is only entered at its
# start (`(?<!\s)`) and never given back (possessive), so no two quantifiers share its spaces; the
# spaces a separator leaves around a clause are stripped by `clauses`.
_SPLIT_RE = re.compile(r"(?:;|\.\s|,?(?<!\s)\s++(?:и|а потом|потом|затем|then|and|also)\s)\s*+")
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
    # `\b`: one try per word, not one per "набор" inside a long word (linear)
    ("search_datasets", r"датасет|dataset|\bнабор\w* данных", None),
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
    "for about of in on all dashboards dashboard reports report with list какие есть "
    "датасет датасеты датасетов датасета dataset datasets"
    .split()
)


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
    return [c for c in (part.strip() for part in _SPLIT_RE.split(text.strip())) if c]


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


@dataclass(frozen=True)
class _Clause:
    """What one clause offers a call's arguments: its words, numbers and environments, and
    the turn's context (UIContext, selected environment) for what it leaves out."""

    text: str
    ctx: TurnContext
    ui: dict[str, Any]
    envs: list[str]
    nums: list[int]

    @classmethod
    def read(cls, clause: str, ctx: TurnContext) -> _Clause:
        return cls(clause, ctx, ctx.uicontext or {}, envs_in(clause), numbers_in(clause))

    def ui_object(self, kind: str) -> int | None:
        """The UIContext's object id when it is a `kind`."""
        if self.ui.get("objectType") == kind and self.ui.get("objectId"):
            return int(self.ui["objectId"])
        return None

    def first_number(self) -> int | None:
        return self.nums[0] if self.nums else None


def _env_id(c: _Clause) -> Any:
    """The clause's last environment; for "этот" the page's; else the selected one."""
    if c.envs:
        return c.envs[-1]
    if refers_to_context(c.text) and c.ui.get("envId"):
        return c.ui["envId"]
    return c.ctx.env_id or c.ui.get("envId") or None


def _source_env(c: _Clause) -> Any:
    return c.envs[0] if len(c.envs) > 1 else (c.ctx.env_id or c.ui.get("envId") or "ss-dev")


def _task_id(c: _Clause) -> str | None:
    m = _TASK_RE.search(normalize(c.text))
    return m.group(1) if m else None


# Each argument the planner fills, from a clause; None: the clause does not give it.
_ARGUMENTS: dict[str, Callable[[_Clause], Any]] = {
    "env_id": _env_id,
    "target_env": lambda c: c.envs[-1] if c.envs else None,
    "source_env": _source_env,
    # A number in the clause, else the page's object ("этот дашборд", or no id at all).
    "dashboard_id": lambda c: c.first_number() if c.nums else c.ui_object("dashboard"),
    "dataset_id": lambda c: c.first_number() if c.nums else c.ui_object("dataset"),
    "database_id": _Clause.first_number,
    "event_id": _Clause.first_number,
    "task_id": _task_id,
    "query": lambda c: search_words(c.text) or None,
    "reason": lambda c: c.text[:200],
    # An upstream MCP tool's (Superset's `request: {search, identifier}`): the words sought,
    # the object's number.
    "search": lambda c: search_words(c.text) or None,
    "identifier": _Clause.first_number,
}


def plan_call(tool: str, clause: str, ctx: TurnContext,
              schema: dict[str, Any]) -> dict[str, Any] | None:
    """Arguments for one call, or None when the clause lacks what the tool requires."""
    required: list[str] = schema.get("required", [])
    args = _fill(schema, _Clause.read(clause, ctx))
    if "env_id" in required and "env_id" not in args:
        args["env_id"] = "ss-dev"
    if any(r not in args for r in required):
        return None
    return args


def _fill(schema: dict[str, Any], words: _Clause) -> dict[str, Any]:
    """The arguments of one object schema the clause gives. An argument that is an object of
    its own (an upstream tool's `request`) is filled the same way, inside, and given when it
    has all it requires (even empty, if it is required itself)."""
    args: dict[str, Any] = {}
    for name, sub in schema.get("properties", {}).items():
        fill = _ARGUMENTS.get(name)
        value = fill(words) if fill is not None else None
        if value is None and isinstance(sub, dict) and "properties" in sub:
            inner = _fill(sub, words)
            complete = all(r in inner for r in sub.get("required", []))
            if complete and (inner or name in schema.get("required", [])):
                value = inner
        if value is not None:
            args[name] = value
    return args
