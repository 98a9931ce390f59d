"""Keyword matching for tool selection: the catalog's keywords against the query's word forms.

Never raw substrings ("db" must not fire inside "feedback"): the query and every keyword are
tokenized into whole words and compared word by word, so a keyword of several words
("roll out") matches the same words in a row. A query word meets a keyword word when

- their stems are equal (inflection: "дашбордов" ~ "дашборд", "deployed" ~ "deploy");
- one stem extends the other by at most 2 letters, the shorter having at least 4
  (Snowball's uneven stems: "задепл" ~ "задепло");
- they are one edit apart (two from 8 letters), comparing stems or the words themselves,
  both at least 5 letters long (typos: "обнавить" ~ "обновить", "dashbords" ~ "dashboards").
  Damerau-Levenshtein, so a swap of two neighbours is one edit.

Shorter words ("бд", "env", "hi") only match exactly: one edit on them is another word.
A word the catalog knows as written (a keyword word, or a word of an environment name such as
"stage") is never taken for a typo: "stage" is not a misspelt "stale", "выключи" not "включи".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from rapidfuzz import process
from rapidfuzz.distance import DamerauLevenshtein, Prefix

from agentchat.agent.selection.text import Token, tokenize
from agentchat.catalog import Catalog

How = Literal["exact", "form", "typo"]
_RANK: dict[str, int] = {"exact": 0, "form": 1, "typo": 2}

MIN_FORM = 4  # shortest stem that may be extended ("задепл" ~ "задепло")
MAX_FORM_GAP = 2
MIN_TYPO = 5  # shortest word that may carry a typo
LONG_TYPO = 8  # from this length two edits are a typo


@dataclass(frozen=True, slots=True)
class Unit:
    """One keyword word: its stem and normalized form."""

    stem: str
    word: str


@dataclass(frozen=True, slots=True)
class Phrase:
    tool: str
    keyword: str
    units: tuple[Unit, ...]


@dataclass(frozen=True, slots=True)
class Hit:
    tool: str
    keyword: str
    words: str  # the query's words that matched
    how: How

    def as_dict(self) -> dict[str, str]:
        return {"keyword": self.keyword, "words": self.words, "how": self.how}


def _typo_budget(a: str, b: str) -> int:
    shortest = min(len(a), len(b))
    if shortest >= LONG_TYPO:
        return 2
    return 1 if shortest >= MIN_TYPO else 0


class KeywordMatcher:
    """Built once from the catalog; `match` is pure and thread-safe."""

    def __init__(self, catalog: Catalog) -> None:
        self.phrases: list[Phrase] = []
        for tool in catalog.tools:
            for keyword in [*tool.keywords.ru, *tool.keywords.en]:
                units = tuple(Unit(t.stem, t.word) for t in tokenize(keyword))
                if units:
                    self.phrases.append(Phrase(tool.name, keyword, units))
        self._units = sorted({u for p in self.phrases for u in p.units}, key=lambda u: u.word)
        self._stems = [u.stem for u in self._units]
        self._words = [u.word for u in self._units]
        self._by_stem: dict[str, list[Unit]] = {}
        for u in self._units:
            self._by_stem.setdefault(u.stem, []).append(u)
        self._known_words = set(self._words) | {
            t.word for env in catalog.environments for t in tokenize(env)}
        # Phrases by their first word, so `match` only tries phrases whose first word the
        # query has (most queries meet a handful of the ~300 phrases).
        self._by_first: dict[Unit, list[tuple[int, Phrase]]] = {}
        for order, phrase in enumerate(self.phrases):
            self._by_first.setdefault(phrase.units[0], []).append((order, phrase))

    def _unit_matches(self, token: Token) -> dict[Unit, How]:
        """Every keyword word this query word meets, with the best way it meets it."""
        found: dict[Unit, How] = {u: "exact" for u in self._by_stem.get(token.stem, [])}
        if token.is_number or len(token.stem) < MIN_FORM:
            return found

        def add(unit: Unit, how: How) -> None:
            if unit not in found or _RANK[how] < _RANK[found[unit]]:
                found[unit] = how

        for _, common, i in process.extract(
            token.stem, self._stems, scorer=Prefix.similarity, score_cutoff=MIN_FORM, limit=None
        ):
            other = self._stems[i]
            shorter = min(len(other), len(token.stem))
            if common == shorter and abs(len(other) - len(token.stem)) <= MAX_FORM_GAP:
                add(self._units[i], "form")
        if len(token.word) >= MIN_TYPO and token.word not in self._known_words:
            for mine, choices in ((token.stem, self._stems), (token.word, self._words)):
                for _, dist, i in process.extract(
                    mine, choices, scorer=DamerauLevenshtein.distance, score_cutoff=2, limit=None
                ):
                    if 0 < dist <= _typo_budget(mine, choices[i]):
                        add(self._units[i], "typo")
        return found

    def match(self, tokens: Sequence[Token]) -> list[Hit]:
        """Keyword hits in the query, at most one per (tool, keyword), in catalog order."""
        per_token = [self._unit_matches(t) for t in tokens]
        hits: dict[tuple[str, str], tuple[int, Hit]] = {}
        for start, first in enumerate(per_token):
            for unit in first:
                for order, phrase in self._by_first.get(unit, ()):
                    n = len(phrase.units)
                    if start + n > len(tokens):
                        continue
                    found = [per_token[start + j].get(u) for j, u in enumerate(phrase.units)]
                    hows = [h for h in found if h is not None]
                    if len(hows) < len(found):
                        continue
                    how: How = max(hows, key=lambda h: _RANK[h])
                    key = (phrase.tool, phrase.keyword)
                    if key not in hits or _RANK[how] < _RANK[hits[key][1].how]:
                        words = " ".join(t.word for t in tokens[start:start + n])
                        hits[key] = (order, Hit(phrase.tool, phrase.keyword, words, how))
        return [hit for _, hit in sorted(hits.values(), key=lambda oh: oh[0])]


def hits_by_tool(hits: Iterable[Hit]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for h in hits:
        out.setdefault(h.tool, []).append(h.as_dict())
    return out
