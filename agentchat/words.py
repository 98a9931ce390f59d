"""Words for people: the turn's language, object names safe to show, and the texts the
server says (docs/protocol.md §10, "Words").

A turn's language is decided once, from the user's message at the turn's start, and kept
with the turn (its plan) so its resumes (`__resume__` has no language) speak the same.

- `turn_language(text)`: "ru" or "en" by the letters the message is mostly written in.
- `safe_name(value)`: an object's name (a dashboard's title…) as a card or an answer may show
  it: control and bidi characters gone, whitespace collapsed, at most `NAME_CHARS` characters,
  quoted («…» or “…”). Names come from ss-tools data or the UIContext, so they are the user's
  or an attacker's words, never the agent's: they are always quoted, never interpreted.
- `object_label(kind, id, name, lang)`: «Name» (№42), or without a name the id alone.
- `error_text(code, detail, lang)`: an `error` event's (content, detail) in the turn's language.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

Lang = Literal["ru", "en"]
LANGS: tuple[Lang, ...] = ("ru", "en")
NAME_CHARS = 80

_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[A-Za-z]")
# Words that are Latin in a Russian message without making it English: ids, environments,
# product names. Counted as neither language.
_NEUTRAL = {"ss-dev", "ss-stage", "prod", "dev", "stage", "superset", "ss-tools", "yaml",
            "json", "sla", "id", "ok", "co2", "kpi"}
_WORD = re.compile(r"[\w-]+")


def turn_language(text: str, default: Lang = "ru") -> Lang:
    """Russian or English by the letters the message is mostly written in (mixed: the main
    one); environment names and ids do not count; no letters at all keeps `default`."""
    cyrillic = latin = 0
    for word in _WORD.findall(text):
        if word.lower() in _NEUTRAL or word.lower().startswith("task-"):
            continue
        cyrillic += len(_CYRILLIC.findall(word))
        latin += len(_LATIN.findall(word))
    if cyrillic == latin == 0:
        return default
    return "ru" if cyrillic >= latin else "en"


def as_lang(value: object) -> Lang:
    """A stored language back (a turn's plan): anything but "en" is the default, Russian."""
    return "en" if value == "en" else "ru"


# Bidi controls (embeddings, overrides, isolates, marks) and other invisible format characters
# can make a name read differently from what it is ("…‮dorp‬" shows as "…prod"): all go.
_BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def clean_text(value: object) -> str:
    """Text with control, format (bidi included) and private-use characters removed and
    whitespace collapsed to single spaces."""
    out = []
    for ch in str(value):
        cat = unicodedata.category(ch)
        if ch in _BIDI or cat in ("Cf", "Co", "Cs", "Cn"):
            continue
        out.append(" " if cat in ("Cc", "Zl", "Zp", "Zs") else ch)
    return " ".join("".join(out).split())


def safe_name(value: object, lang: Lang = "ru", limit: int = NAME_CHARS) -> str:
    """An object's name, cleaned, cut to `limit` characters (an ellipsis marks the cut) and
    quoted in the language's quotes; the quote characters inside are replaced, so the name
    cannot close its own quotes."""
    text = clean_text(value).replace("«", "‹").replace("»", "›").replace("“", "'") \
        .replace("”", "'").replace('"', "'")
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return f"«{text}»" if lang == "ru" else f"“{text}”"


def object_label(object_id: object, name: object | None, lang: Lang) -> str:
    """«Name» (№42) when the name is known, else №42 (ru) / #42 (en)."""
    number = ("№" if lang == "ru" else "#") + clean_text(object_id)[:40]
    if name is None or not clean_text(name):
        return number
    return f"{safe_name(name, lang)} ({number})"


def pick(lang: Lang, ru: str, en: str) -> str:
    return ru if lang == "ru" else en


def plural_ru(n: int, one: str, few: str, many: str) -> str:
    """The Russian noun form for a count: 1 дашборд, 2 дашборда, 5 дашбордов."""
    n = abs(n)
    if n % 10 == 1 and n % 100 != 11:
        return one
    if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14:
        return few
    return many


# -- the texts of `error` events ------------------------------------------------------------

# Per ErrorCode (by its string, so this module needs no import of the errors module): what the
# user reads, in each language. The English one is used only when the detail is empty; an
# English turn keeps the server's own detail, which is English and more specific.
ERROR_TEXTS: dict[str, tuple[str, str]] = {
    "UNAUTHORIZED": ("нужно войти заново: токен пользователя не принят",
                     "sign in again: the user token was not accepted"),
    "FORBIDDEN": ("ss-tools отказал в этом действии: у вас нет на него прав",
                  "ss-tools refused this action: you may not run it"),
    "NOT_FOUND": ("такого диалога нет (или он не ваш)",
                  "no such conversation (or it is not yours)"),
    "INVALID_REQUEST": ("запрос не принят: он слишком большой или составлен неверно",
                        "the request was refused: it is too large or malformed"),
    "CONVERSATION_BUSY": ("диалог сейчас занят: в нём уже идёт ответ или он открыт в другой "
                          "вкладке; попробуйте через несколько секунд",
                          "the conversation is busy: an answer is running or it is open in "
                          "another tab; try again in a few seconds"),
    "CONVERSATION_ARCHIVED": ("диалог в архиве: восстановите его, чтобы продолжить",
                              "the conversation is archived: restore it to go on"),
    "NO_PENDING_CONFIRMATION": ("подтверждать нечего: карточка уже закрыта",
                                "nothing to confirm: the card is already closed"),
    "STALE_CONFIRMATION": ("эта карточка уже не актуальна: ответьте на последнюю",
                           "this card is no longer the pending one: answer the latest card"),
    "LLM_UNAVAILABLE": ("модель сейчас недоступна; попробуйте ещё раз",
                        "the model is unavailable right now; try again"),
    "POLICY_UNAVAILABLE": ("не удалось проверить права: сервис политик недоступен; ничего не "
                           "выполнено, попробуйте ещё раз",
                           "permissions could not be checked (the policy service is "
                           "unavailable); nothing ran, try again"),
    "STORAGE_UNAVAILABLE": ("база данных недоступна; попробуйте через минуту",
                            "the database is unavailable; try again in a minute"),
    "TOOL_FAILURE": ("действие не удалось", "the action failed"),
    "INTERNAL": ("внутренняя ошибка сервиса; попробуйте ещё раз",
                 "an internal error; try again"),
    "RATE_LIMITED": ("слишком много запросов подряд; подождите немного",
                     "too many requests in a row; wait a moment"),
    "NO_RUN": ("нет такого выполнения, к которому можно подключиться",
               "there is no such run to join"),
    "JOIN_EXPIRED": ("события этого выполнения больше не хранятся; откройте историю диалога",
                     "this run's events are no longer kept; open the conversation's history"),
    "RUN_LOST": ("выполнение прервалось на сервере; нажмите «Повторить», чтобы завершить его",
                 "the run stopped on the server; press Retry to complete it"),
    "AGENT_SATURATED": ("сервис сейчас перегружен; попробуйте через несколько секунд",
                        "the service is overloaded; try again in a few seconds"),
    "ALREADY_ANSWERED": ("вы уже ответили на этот запрос подтверждения",
                         "you have already answered this approval"),
    "APPROVAL_EXPIRED": ("срок запроса подтверждения истёк; ничего не выполнено",
                         "this approval expired; nothing ran"),
}


def error_text(code: str, detail: str, lang: Lang) -> tuple[str, str]:
    """An `error` event's (content, detail) in the turn's language.

    Russian: the code's Russian text for both (the server's details are English, so none of
    their words leak into a Russian answer); `content` is "Ошибка: …". English: the server's
    own detail (the code's text when it is empty), `content` "Error: …". An unknown code gets
    the INTERNAL text."""
    ru, en = ERROR_TEXTS.get(str(code), ERROR_TEXTS["INTERNAL"])
    if lang == "ru":
        return f"Ошибка: {ru}", ru
    text = clean_text(detail) or en
    return f"Error: {text}", text
