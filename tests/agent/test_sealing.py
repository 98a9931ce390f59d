"""The token a live run keeps for its takeover is sealed (agent/storage/sealing.py): it opens
only under one of the keys, unaltered, for the run, conversation and subject it was sealed
with; the keys are a list the operator rotates (newest first, re-read on change); without a
key nothing is kept. The takeover's side (a foreign seal ends the run RUN_LOST
`unresumable`) is tests/system/test_takeover.py's."""

from __future__ import annotations

import os
from pathlib import Path

import jwt
import pytest
from cryptography.fernet import Fernet
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage.sealing import TokenSeal, _fernet

KEY, OLD, NEW = "k" * 32, "o" * 40, "n" * 48
RUN = {"run": "run-a", "conversation": "conv-1"}


def token_of(sub: str) -> str:
    return jwt.encode({"sub": sub, "exp": 2_000_000_000}, "s" * 32, algorithm="HS256")


@given(st.text(min_size=1, max_size=2000))
def test_a_sealed_token_opens_to_itself_and_shows_nothing_of_it(token: str) -> None:
    seal = TokenSeal.of(KEY)
    sealed = seal.seal(token, **RUN)
    assert sealed is not None and seal.open(sealed, **RUN) == token
    assert len(token) < 8 or token not in sealed


def test_another_key_or_an_altered_seal_does_not_open() -> None:
    sealed = TokenSeal.of(KEY).seal(token_of("alice"), **RUN)
    assert sealed is not None
    with pytest.raises(ValueError):
        TokenSeal.of("other-" + KEY).open(sealed, **RUN)
    altered = sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:]
    with pytest.raises(ValueError):
        TokenSeal.of(KEY).open(altered, **RUN)


def test_a_seal_opens_only_for_its_run_conversation_and_subject() -> None:
    """Copied into another run's row (another conversation's, another user's), it does not
    open: the takeover then ends that run RUN_LOST `unresumable`."""
    seal = TokenSeal.of(KEY)
    alice = token_of("alice")
    sealed = seal.seal(alice, **RUN)
    assert sealed is not None and seal.open(sealed, **RUN, sub="alice") == alice
    for other in ({"run": "run-b", "conversation": "conv-1"},
                  {"run": "run-a", "conversation": "conv-2"}):
        with pytest.raises(ValueError, match="another run"):
            seal.open(sealed, **other)
    with pytest.raises(ValueError, match="another subject"):
        seal.open(sealed, **RUN, sub="bob")
    # A seal of the bare token under the same key (bound to nothing, as before the binding).
    bare = _fernet(KEY).encrypt(alice.encode()).decode()
    with pytest.raises(ValueError, match="not bound"):
        seal.open(bare, **RUN)


def test_after_a_rotation_old_seals_open_and_new_ones_seal_under_the_new_key(
        tmp_path: Path) -> None:
    """The operator's file: one key a line, newest first, read again when it changes (no
    restart). AGENTCHAT_AGENT_RESUME_KEY lists keys the same way, with commas or newlines."""
    path = tmp_path / "resume-key"
    path.write_text(OLD + "\n")
    seal = TokenSeal.of(None, path)
    token = token_of("alice")
    before = seal.seal(token, **RUN)
    assert before is not None
    path.write_text(f"{NEW}\n{OLD}\n")  # a rotation: the new key prepended
    assert seal.open(before, **RUN) == token
    after = seal.seal(token, **RUN)
    assert after is not None
    assert TokenSeal.of(NEW).open(after, **RUN) == token  # sealed under the new key
    with pytest.raises(ValueError):
        TokenSeal.of(OLD).open(after, **RUN)
    for listed in (f"{NEW},{OLD}", f"{NEW}\n{OLD}\n", f" {NEW} , {OLD} "):
        both = TokenSeal.of(listed)
        assert both.open(before, **RUN) == both.open(after, **RUN) == token
    os.remove(path)  # a moment of a Secret's swap: the keys last read stand
    assert seal.open(after, **RUN) == token


def test_a_key_file_written_after_start_is_read_when_first_needed(tmp_path: Path) -> None:
    """The chart's case: the operator writes `resume-key` beside the service token, maybe
    after the pod started. A line too short to be a key is not used."""
    path = tmp_path / "resume-key"
    seal = TokenSeal.of(None, path, fallback=None)
    assert seal.seal("eyJ.a.b", **RUN) is None  # no key yet: nothing kept
    path.write_text("short\n")
    assert seal.seal("eyJ.a.b", **RUN) is None
    path.write_text(KEY + "\n")
    sealed = seal.seal("eyJ.a.b", **RUN)
    assert sealed is not None and TokenSeal.of(KEY).open(sealed, **RUN) == "eyJ.a.b"


def test_without_a_key_nothing_is_kept() -> None:
    seal = TokenSeal.of(None)
    assert seal.seal("eyJ.a.b", **RUN) is None
    with pytest.raises(ValueError):
        seal.open(Fernet.generate_key().decode(), **RUN)


def test_every_listed_key_needs_32_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCHAT_AGENT_RESUME_KEY", f"{NEW},too-short-a-key")
    with pytest.raises(ValidationError) as refused:
        AgentSettings(mode="dev")
    assert "every key needs 32 characters" in str(refused.value)
    assert "too-short-a-key" not in "; ".join(e["msg"] for e in refused.value.errors())
    monkeypatch.setenv("AGENTCHAT_AGENT_RESUME_KEY", f"{NEW}\n{OLD}")
    assert AgentSettings(mode="dev").resume_key == f"{NEW}\n{OLD}"
