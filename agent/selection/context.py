"""What a query refers to: the UIContext's object ("этот дашборд", "this dataset", "deploy it"),
dashboards named by id ("дашборд 42", "dashboard #42") and the environments it names ("проде",
"стейджевую", "staging").

The agent prefetches the summary of every dashboard `resolve_dashboard_refs` returns, and the
selector steers toward the context object's tools when `refers_to_context` holds. The rules are
word rules on normalized tokens, so they explain themselves and cost microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentchat.agent.selection.text import Token, stem, tokenize

# Words that name an object of each type, as normalized word prefixes (covers inflection,
# "dashbords" and the like). Matching a prefix of a whole word, never a substring inside one.
OBJECT_NOUNS: dict[str, tuple[str, ...]] = {
    "dashboard": ("дашборд", "дашбордик", "дашик", "отчет", "отчёт", "борд", "dashb",
                  "dashboard", "report", "board"),
    "dataset": ("датасет", "dataset", "набор"),
    "migration": ("миграц", "migration", "перенос"),
    "database": ("баз", "бд", "database", "db"),
}
# Nouns after which a number is a dashboard id ("дашборд 42", "report #7").
_DASHBOARD_ID_NOUNS = ("дашборд", "дашик", "борд", "отчет", "dashb", "board", "report")
# Words between the noun and the id that do not break the reference ("dashboard id 42").
_ID_FILLERS = {"id", "no", "номер", "n", "nr", "number"}
_LIST_JOINERS = {"и", "and", "or", "или"}
# Words that point at what the user is looking at.
DEICTIC = {
    "этот", "эта", "это", "этого", "этой", "этом", "этому", "эту", "этим",
    "данный", "данного", "данном", "текущий", "текущего", "текущем", "его", "ее", "её", "него",
    "нее", "здесь", "тут", "this", "current", "it", "here", "that",
}
MAX_ID = 2**31 - 1
# How users name each environment. Russian words by stem, so every form meets them ("проде",
# "продом", "стейджа", "стейджевую", "девом"); Latin words as written, because English stems
# are too short to tell ("production" -> "product", as of "products").
ENVIRONMENT_WORDS: dict[str, tuple[str, ...]] = {
    "prod": ("prod", "production", "прод", "продакшн", "продакшен", "продакшене",
             "продуктив", "продовый"),
    "ss-stage": ("stage", "staging", "стейдж", "стейджинг", "стейджевый"),
    "ss-dev": ("dev", "дев", "девовый"),
}
_ENV_BY_STEM = {stem(w): env for env, words in ENVIRONMENT_WORDS.items() for w in words
                if not w.isascii()}
_ENV_BY_WORD = {w: env for env, words in ENVIRONMENT_WORDS.items() for w in words
                if w.isascii()}


def _object_types(tokens: Sequence[Token]) -> set[str]:
    found = set()
    for t in tokens:
        for kind, prefixes in OBJECT_NOUNS.items():
            if any(t.word.startswith(p) for p in prefixes):
                found.add(kind)
    return found


def environments_named(tokens: Sequence[Token]) -> list[str]:
    """The environments the query names, in order of first mention."""
    found: list[str] = []
    for t in tokens:
        env = _ENV_BY_WORD.get(t.word) or _ENV_BY_STEM.get(t.stem)
        if env is not None and env not in found:
            found.append(env)
    return found


def explicit_dashboard_ids(tokens: Sequence[Token]) -> list[int]:
    """Ids written after a dashboard noun: "дашборд 42", "dashboards 3, 4 and 5"."""
    ids: list[int] = []
    i = 0
    while i < len(tokens):
        if not tokens[i].word.startswith(_DASHBOARD_ID_NOUNS):
            i += 1
            continue
        j = i + 1
        while j < len(tokens) and tokens[j].word in _ID_FILLERS:
            j += 1
        while j < len(tokens) and tokens[j].is_number:
            value = int(tokens[j].word)
            if 0 < value <= MAX_ID and value not in ids:
                ids.append(value)
            j += 1
            if j + 1 < len(tokens) and tokens[j].word in _LIST_JOINERS and tokens[j + 1].is_number:
                j += 1
        i = max(j, i + 1)
    return ids


def context_object(uicontext: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(objectType, objectId) of a UIContext that names an object, else None."""
    if not uicontext:
        return None
    kind, oid = uicontext.get("objectType"), uicontext.get("objectId")
    if not isinstance(kind, str) or oid is None or str(oid).strip() == "":
        return None
    return kind, str(oid).strip()


def refers_to_context(query: str, uicontext: Mapping[str, Any] | None,
                      tokens: Sequence[Token] | None = None) -> bool:
    """Whether the query is about the UIContext's object.

    Yes when it names the object ("отчёт по энергопотреблению"), points at it ("этот
    дашборд", "deploy it") without naming an object of another type, or names no object and
    no id at all ("задеплой в прод" on a dashboard's page).
    """
    obj = context_object(uicontext)
    if obj is None:
        return False
    kind, _ = obj
    tokens = list(tokens) if tokens is not None else tokenize(query)
    name = (uicontext or {}).get("objectName")
    if isinstance(name, str) and len(name.strip()) >= 4:
        if " ".join(t.word for t in tokenize(name)) in " ".join(t.word for t in tokens):
            return True
    kinds = _object_types(tokens)
    if any(t.word in DEICTIC for t in tokens) and (not kinds or kind in kinds):
        return True
    has_number = any(t.is_number for t in tokens)
    return not kinds and not has_number and len(tokens) >= 2


def resolve_dashboard_refs(query: str, uicontext: Mapping[str, Any] | None = None) -> list[int]:
    """Dashboard ids the query refers to, in order: explicit ids, then the UIContext's
    dashboard when the query is about it. The agent prefetches their summaries."""
    tokens = tokenize(query)
    ids = explicit_dashboard_ids(tokens)
    obj = context_object(uicontext)
    if obj is not None and obj[0] == "dashboard" and obj[1].isdigit() and not ids:
        value = int(obj[1])
        if 0 < value <= MAX_ID and refers_to_context(query, uicontext, tokens):
            ids.append(value)
    return ids

