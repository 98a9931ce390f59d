"""Kept only for `agent/main.py`, which imports `STORAGE_ERRORS` from here; the storage layer
is the package's modules (see `__init__.py`). Import from `agentchat.agent.storage.db`."""

from agentchat.agent.storage.db import STORAGE_ERRORS

__all__ = ["STORAGE_ERRORS"]
