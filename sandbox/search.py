"""Word matching for the search endpoints, in Russian and English.

Case-insensitive, `ё` = `е`, and stemmed (Snowball) so "отчёты" finds "Отчёт" and "reports"
finds "report". A query word matches a text when its stem is a prefix of one of the text's word
stems; results keep only the texts that matched the most query words, so "energy report" finds
the energy report and not every report.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import TypeVar

import snowballstemmer

_WORD = re.compile(r"[0-9a-zа-я]+")
_CYRILLIC = re.compile(r"[а-я]")
# Words that say what is searched for rather than what it is about.
STOPWORDS = frozenset(
    "дашборд дашборды дашборда дашбордов панель отчет по и в на для за the a an of for and "
    "in on dashboard dashboards panel show find найди найти покажи".split()
)
T = TypeVar("T")
_STEMMERS = {"ru": snowballstemmer.stemmer("russian"), "en": snowballstemmer.stemmer("english")}


def normalize(text: str) -> str:
    return text.lower().replace("ё", "е")


@lru_cache(maxsize=8192)
def stem(word: str) -> str:
    lang = "ru" if _CYRILLIC.search(word) else "en"
    return str(_STEMMERS[lang].stemWord(word))


def words(text: str) -> list[str]:
    return _WORD.findall(normalize(text))


def query_terms(query: str | None) -> list[str]:
    """The stems of the query's meaningful words (all of them if only stopwords are left)."""
    ws = words(query or "")
    meaningful = [w for w in ws if w not in STOPWORDS] or ws
    return list(dict.fromkeys(stem(w) for w in meaningful))


def score(terms: list[str], texts: Iterable[str]) -> int:
    stems = {stem(w) for t in texts for w in words(t)}
    return sum(1 for term in terms if any(s.startswith(term) for s in stems))


def best_matches(items: Iterable[T], query: str | None,
                    texts: Callable[[T], Iterable[str]]) -> list[T]:
    """Items matching the most query words, in their original order; all items for no query."""
    terms = query_terms(query)
    items = list(items)
    if not terms:
        return items
    scored = [(score(terms, texts(item)), item) for item in items]
    best = max((s for s, _ in scored), default=0)
    return [item for s, item in scored if s == best and best > 0]
