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

A keyword may hold a gap, "…" (or "..."): up to MAX_GAP other words may stand there, so
"как … там" meets "как там", "как он там" and "как прод там", and "how is … doing" meets "how
is prod doing" but not "how do I". Colloquial questions put the subject inside the frame, and a
frame's words alone ("как", "is") say nothing. Matching stays linear in the query: at most
MAX_GAP + 1 positions are tried for each word of a phrase.
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
GAP_MARKS = ("…", "...")  # a gap in a keyword
MAX_GAP = 4  # words a gap may hold
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
    # Words that may stand before each unit (0: right after the previous one); gaps[0] is 0.
    gaps: tuple[int, ...]


def keyword_words(keyword: str) -> str:
    """The keyword's words without its gap marks (what an embedding sees of it)."""
    for mark in GAP_MARKS:
        keyword = keyword.replace(mark, " ")
    return " ".join(keyword.split())


def parse_phrase(tool: str, keyword: str) -> Phrase | None:
    """A keyword's words and gaps; None if it has no word. A gap must stand between words."""
    text = keyword
    for mark in GAP_MARKS[1:]:
        text = text.replace(mark, GAP_MARKS[0])
    parts = [tokenize(part) for part in text.split(GAP_MARKS[0])]
    if len(parts) > 1 and not all(parts):
        raise ValueError(f"keyword {keyword!r} of tool {tool!r}: a gap must stand between words")
    units: list[Unit] = []
    gaps: list[int] = []
    for n, part in enumerate(parts):
        for i, t in enumerate(part):
            units.append(Unit(t.stem, t.word))
            gaps.append(MAX_GAP if n and not i else 0)
    return Phrase(tool, keyword, tuple(units), tuple(gaps)) if units else None


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
                phrase = parse_phrase(tool.name, keyword)
                if phrase is not None:
                    self.phrases.append(phrase)
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
        # A word is looked up once however often it recurs (a pasted log repeats its words).
        seen: dict[Token, dict[Unit, How]] = {}
        per_token = [seen[t] if t in seen else seen.setdefault(t, self._unit_matches(t))
                     for t in tokens]
        hits: dict[tuple[str, str], tuple[int, Hit]] = {}
        for start, first in enumerate(per_token):
            for unit, how_first in first.items():
                for order, phrase in self._by_first.get(unit, ()):
                    met = _meet(per_token, phrase, start, how_first)
                    if met is None:
                        continue
                    how, end = met
                    key = (phrase.tool, phrase.keyword)
                    if key not in hits or _RANK[how] < _RANK[hits[key][1].how]:
                        words = " ".join(t.word for t in tokens[start:end + 1])
                        hits[key] = (order, Hit(phrase.tool, phrase.keyword, words, how))
        return [hit for _, hit in sorted(hits.values(), key=lambda oh: oh[0])]


def _meet(per_token: Sequence[dict[Unit, How]], phrase: Phrase, start: int,
          how_first: How) -> tuple[How, int] | None:
    """The best way the phrase meets the query from `start` (its first word met there as
    `how_first`), and the index of its last word; None if it does not. Each step keeps, for
    every position the phrase may have reached, the best way there: at most MAX_GAP + 1
    positions, so this is linear in the phrase's length."""
    reached: dict[int, How] = {start: how_first}
    for unit, gap in zip(phrase.units[1:], phrase.gaps[1:], strict=True):
        ahead: dict[int, How] = {}
        for pos, how in reached.items():
            for k in range(pos + 1, min(pos + 2 + gap, len(per_token))):
                found = per_token[k].get(unit)
                if found is None:
                    continue
                worse = max(how, found, key=lambda h: _RANK[h])
                if k not in ahead or _RANK[worse] < _RANK[ahead[k]]:
                    ahead[k] = worse
        if not ahead:
            return None
        reached = ahead
    # The best way; of equals, the shortest span.
    end = min(reached, key=lambda k: (_RANK[reached[k]], k))
    return reached[end], end

def hits_by_tool(hits: Iterable[Hit]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for h in hits:
        out.setdefault(h.tool, []).append(h.as_dict())
    return out
