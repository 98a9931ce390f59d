"""Word forms for tool selection: tokenize, normalize (case, `ё`→`е`) and stem.

Russian words go through Snowball's Russian stemmer and Latin words through its English one,
so "дашборды"/"дашбордов" and "deploying"/"deployed" meet their keyword as one stem. Snowball
is a suffix stripper, not a lemmatizer ("задеплой"→"задепл", "задеплоить"→"задепло"): the
keyword matcher covers that with prefix and edit-distance rules on top (selection_keywords).
One gap is closed here: Snowball leaves the "-ова-" of "-овать" verbs in the infinitive and
past ("мигрировать"→"мигрирова") but not in the imperative ("мигрируй"→"мигрир"), three
letters apart; such stems drop it, so all forms of the verb meet.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

# Letters and digits; "ss-dev" splits into "ss" and "dev", "#42" into "42".
_WORD = re.compile(r"[^\W_]+")
_CYRILLIC = re.compile(r"[а-я]")
_LATIN = re.compile(r"[a-z]")
# "скопирова" -> "скопир": at least 4 letters stay, so "готова"/"основа" are left alone.
_MIN_OVA_STEM = 7

# Snowball stemmers keep state between calls: one per thread.
_local = threading.local()


def normalize(text: str) -> str:
    """Lower case with `ё` folded into `е` (users type either)."""
    return text.lower().replace("ё", "е")


def _stemmers() -> tuple[snowballstemmer.stemmer, snowballstemmer.stemmer]:
    pair = getattr(_local, "pair", None)
    if pair is None:
        pair = (snowballstemmer.stemmer("russian"), snowballstemmer.stemmer("english"))
        _local.pair = pair
    return pair


@lru_cache(maxsize=50_000)
def stem(word: str) -> str:
    """Stem of one normalized word; digits and mixed-script words stay as they are."""
    has_ru, has_en = bool(_CYRILLIC.search(word)), bool(_LATIN.search(word))
    ru, en = _stemmers()
    if has_ru and not has_en:
        out = str(ru.stemWord(word))
        if len(out) >= _MIN_OVA_STEM and out.endswith(("ова", "ева")):
            out = out[:-3]
        return out
    if has_en and not has_ru:
        return str(en.stemWord(word))
    return word


@dataclass(frozen=True, slots=True)
class Token:
    word: str  # normalized surface form
    stem: str

    @property
    def is_number(self) -> bool:
        return self.word.isdigit()


def tokenize(text: str) -> list[Token]:
    """The query's words in order, normalized and stemmed."""
    return [Token(w, stem(w)) for w in _WORD.findall(normalize(text))]
