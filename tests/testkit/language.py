"""Is a text said in one language, for people? (issue 18's tests)

`problems(text, lang, machine_names)` lists what is wrong with something the server said to
a person, without a hand-written expected string: the scripts (Cyrillic for Russian, none of
it for English) and common words of the other language, outside the quoted object names
(«…», “…”: a dashboard's title is the user's data, in whatever language it was written);
`snake_case` machine names; JSON braces; internal ids without a label (uuids, call ids, a
task id not introduced as a task).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_QUOTED = re.compile(r"«[^«»]*»|“[^“”]*”|\"[^\"]*\"")
_CYRILLIC = re.compile(r"[А-Яа-яЁё]")
_LATIN_WORD = re.compile(r"[A-Za-z][\w'-]*")
_FILE = re.compile(r"\S+\.(?:yaml|yml|json|csv)\b")
_WORD = re.compile(r"[\w'-]+")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_CALL_ID = re.compile(r"\bcall_[0-9a-z_]+\b")
_TASK = re.compile(r"\btask-[\w-]+")
# Latin words a Russian sentence may carry: environments, products, formats, roles, units.
NEUTRAL = {"ss-dev", "ss-stage", "prod", "ss-tools", "superset", "yaml", "json", "sla", "p95",
           "admin", "editor", "viewer", "alice", "bob", "carol", "dmitry", "elena", "erin",
           "postgresql", "clickhouse", "co2", "kpi", "id", "utc"}
# Common words that only the other language uses (a leak of English into Russian and back).
ENGLISH = {"the", "a", "an", "and", "or", "of", "to", "in", "on", "is", "are", "was", "not",
           "no", "found", "failed", "error", "run", "ran", "task", "dashboard", "dashboards",
           "denied", "queued", "status", "you", "i", "it", "for", "with", "by", "from",
           "done", "unknown", "action", "tool", "cannot", "may", "role", "healthy",
           "degraded", "failing", "running", "succeeded", "expired", "confirmation", "user"}
RUSSIAN_COMMON = {"и", "в", "на", "не", "что", "по", "из", "для", "это", "нет", "дашборд",
                  "задача", "ошибка", "готово"}


def unquoted(text: str) -> str:
    """The text without its quoted names and file names (data, not words)."""
    return _FILE.sub(" ", _QUOTED.sub(" ", text))


def language_problems(text: str, lang: str) -> list[str]:
    """What shows `text` is not (only) in `lang`, outside the quoted names."""
    bare = unquoted(text)
    out = []
    if lang == "ru":
        if len(_CYRILLIC.findall(bare)) < 3:
            out.append("hardly any Cyrillic in a Russian text")
        latin = [w for w in _LATIN_WORD.findall(bare) if w.lower() not in NEUTRAL
                 and not _TASK.fullmatch(w)]
        english = sorted({w for w in latin if w.lower() in ENGLISH})
        if english:
            out.append(f"English words in a Russian text: {english}")
        letters = sum(len(w) for w in latin)
        if letters > max(12, len(_CYRILLIC.findall(bare)) // 5):
            out.append(f"too much Latin in a Russian text: {latin}")
    else:
        if _CYRILLIC.search(bare):
            out.append(f"Cyrillic in an English text: {_CYRILLIC.findall(bare)[:10]}")
        words = {w.lower() for w in _WORD.findall(bare)}
        if not words & ENGLISH:
            out.append("no common English word in an English text")
        if words & RUSSIAN_COMMON:
            out.append(f"Russian words in an English text: {sorted(words & RUSSIAN_COMMON)}")
    return out


def form_problems(text: str, machine_names: Iterable[str]) -> list[str]:
    """Machine names, JSON and unlabelled internal ids in a text for people."""
    out = []
    names = sorted(n for n in machine_names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])",
                                                          unquoted(text)))
    if names:
        out.append(f"machine names: {names}")
    if "{" in text or "}" in text:
        out.append("JSON braces")
    if _UUID.search(text):
        out.append(f"a uuid: {_UUID.search(text).group(0)}")  # type: ignore[union-attr]
    if _CALL_ID.search(text):
        out.append("a call id")
    for m in _TASK.finditer(text):
        before = text[max(0, m.start() - 40):m.start()].lower()
        if not re.search(r"задач\w*|task", before):
            out.append(f"a task id without a label: {m.group(0)}")
    return out


def problems(text: str, lang: str, machine_names: Iterable[str]) -> list[str]:
    if not text.strip():
        return ["empty"]
    return language_problems(text, lang) + form_problems(text, machine_names)
