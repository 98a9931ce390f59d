"""What the offline model's sentences are made of: the turn's language, the tools' titles, the
objects' names and environments, counts and times, each said the same way everywhere
(answers.py and summaries.py use it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentchat.words import Lang, clean_text, object_label, pick, plural_ru, safe_name

LIST_ITEMS = 5

STATUS: dict[str, tuple[str, str]] = {
    "healthy": ("в порядке", "healthy"), "degraded": ("с проблемами", "degraded"),
    "failing": ("не работает", "failing"), "queued": ("в очереди", "queued"),
    "running": ("выполняется", "running"), "succeeded": ("выполнена", "succeeded"),
    "failed": ("завершилась ошибкой", "failed"), "active": ("идёт", "active"),
    "scheduled": ("запланировано", "scheduled"), "ended": ("завершено", "ended"),
}


@dataclass(frozen=True)
class Said:
    """What one answer sentence may use: the language and the tools' titles."""

    lang: Lang
    titles: Mapping[str, str]
    # (kind, id) -> name, from the thread's ss-tools results (agent/graph/names.py)
    names: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def t(self, ru: str, en: str) -> str:
        return pick(self.lang, ru, en)

    def title(self, tool: str | None) -> str:
        """The tool's title, quoted; an unknown tool is "an unknown action"."""
        title = self.titles.get(tool or "")
        if not title:
            return self.t("«неизвестное действие»", "“an unknown action”")
        return f"«{title}»" if self.lang == "ru" else f"“{title}”"

    def status(self, value: Any) -> str:
        ru, en = STATUS.get(str(value), (None, None))
        if ru is None or en is None:
            return self.t("неизвестно", "unknown")
        return self.t(ru, en)

    def count(self, n: int, ru: tuple[str, str, str], en: tuple[str, str]) -> str:
        if self.lang == "ru":
            return f"{n} {plural_ru(n, *ru)}"
        return f"{n} {en[0] if n == 1 else en[1]}"

    def name(self, value: Any) -> str:
        return safe_name(value, self.lang)

    def label(self, oid: Any, obj: Mapping[str, Any], *fields: str) -> str:
        """«Name» (№id) from the first name field the object has (English turns prefer the
        field's `_en` twin)."""
        for f in fields:
            for key in ((f + "_en", f) if self.lang == "en" else (f,)):
                if isinstance(obj.get(key), str) and obj[key]:
                    return object_label(oid, obj[key], self.lang)
        return object_label(oid, None, self.lang)

    def env(self, value: Any) -> str:
        return clean_text(value)[:40]

    def number(self, value: Any) -> str:
        """9 800 000 (ru), 9,800,000 (en)."""
        if not isinstance(value, int) or isinstance(value, bool):
            return clean_text(value)[:20]
        return f"{value:,}".replace(",", " " if self.lang == "ru" else ",")

    def when(self, value: Any) -> str:
        """A timestamp as people write it: 24.11.2026 13:14 UTC (ru), 2026-11-24 13:14 UTC."""
        try:
            t = datetime.fromisoformat(str(value)).astimezone(UTC)
        except ValueError:
            return self.t("неизвестно когда", "unknown time")
        return t.strftime("%d.%m.%Y %H:%M UTC" if self.lang == "ru" else "%Y-%m-%d %H:%M UTC")

    def known(self, kind: str, oid: Any) -> str:
        """«Name» (№id) when a result in the thread named the object, else №id."""
        return object_label(oid, self.names.get((kind, str(oid))), self.lang)


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def capitalized(text: str) -> str:
    return text[:1].upper() + text[1:] if text and text[0] != "«" else text
