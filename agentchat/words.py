"""Words for people: the turn's language (docs/protocol.md §10, "Words").

A turn's language is decided once, from the user's message at the turn's start, and kept
with the turn (its plan) so its resumes (`__resume__` has no language) speak the same.
"""

from __future__ import annotations

from typing import Literal

Lang = Literal["ru", "en"]
LANGS: tuple[Lang, ...] = ("ru", "en")


def turn_language(text: str, default: Lang = "ru") -> Lang:
    """Russian or English by the letters the message is mostly written in; no letters (only
    ids, numbers or emoji) keeps `default`."""
    cyrillic = sum(1 for c in text if "\u0400" <= c <= "\u04ff")
    latin = sum(1 for c in text if c.isascii() and c.isalpha())
    if cyrillic == latin == 0:
        return default
    return "ru" if cyrillic >= latin else "en"
