"""The token a live run keeps for its takeover is sealed (agent/storage/sealing.py): it opens
only under the key it was sealed with, unaltered; without a key nothing is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentchat.agent.storage.sealing import TokenSeal

KEY = "k" * 32


@given(st.text(min_size=1, max_size=2000))
def test_a_sealed_token_opens_to_itself_and_shows_nothing_of_it(token: str) -> None:
    seal = TokenSeal.of(KEY)
    sealed = seal.seal(token)
    assert sealed is not None and seal.open(sealed) == token
    assert len(token) < 8 or token not in sealed


def test_another_key_or_an_altered_seal_does_not_open() -> None:
    sealed = TokenSeal.of(KEY).seal("eyJhbGciOi.payload.sig")
    assert sealed is not None
    with pytest.raises(ValueError):
        TokenSeal.of("other-" + KEY).open(sealed)
    altered = sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:]
    with pytest.raises(ValueError):
        TokenSeal.of(KEY).open(altered)


def test_a_key_file_written_after_start_is_read_when_first_needed(tmp_path: Path) -> None:
    """The chart's case: the operator writes `resume-key` beside the service token, maybe
    after the pod started."""
    path = tmp_path / "resume-key"
    seal = TokenSeal.of(None, path, fallback=None)
    assert seal.seal("eyJ.a.b") is None  # no key yet: nothing kept
    path.write_text(KEY + "\n")
    sealed = seal.seal("eyJ.a.b")
    assert sealed is not None and TokenSeal.of(KEY).open(sealed) == "eyJ.a.b"


def test_without_a_key_nothing_is_kept() -> None:
    seal = TokenSeal.of(None)
    assert seal.seal("eyJ.a.b") is None
    with pytest.raises(ValueError):
        seal.open("anything")
