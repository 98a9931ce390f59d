"""The chat domain's one public face (agent/chat/__init__.py): `__all__` sorted as ruff's
RUF022 sorts it (constants, classes, then functions), and every name in it exists."""

from __future__ import annotations

import agentchat.agent.chat as door


def _key(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_every_name_exists() -> None:
    assert door.__all__ == sorted(door.__all__, key=_key)
    assert len(set(door.__all__)) == len(door.__all__)
    missing = [n for n in door.__all__ if not hasattr(door, n)]
    assert not missing, missing
    assert {"Chat", "Approvals", "ChatRequest", "Run"} <= set(door.__all__)
