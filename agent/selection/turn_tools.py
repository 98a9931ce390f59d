"""Which tools the model sees this turn, and what the agent prefetches before it
(agent/README_selection.md).

Prefetch is an ordinary tool call (`get_dashboard`) made by the agent before the model: it
goes through the policy gate, carries both tokens, is audited and streams tool events.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentchat.agent.selection.context import resolve_dashboard_refs
from agentchat.agent.selection.selector import get_tools_for_query, selector_for
from agentchat.agent.settings import AgentSettings
from agentchat.catalog import Catalog
from agentchat.catalog_source import CatalogSource

log = logging.getLogger("agentchat.agent.selection.selector")
PREFETCH_TOOL = "get_dashboard"
MAX_PREFETCH = 3


@dataclass(frozen=True)
class TurnTools:
    tools: list[str]
    prefetch: list[dict[str, Any]] = field(default_factory=list)
    explain: dict[str, Any] = field(default_factory=dict)


class TurnToolChooser:
    """Decides a turn's tools: the prefetch calls its dashboard references ask for, then the
    tools offered to the model, through `get_tools_for_query`. Built once at start, when the
    selector for these settings is built and its tool vectors computed."""

    def __init__(self, settings: AgentSettings, catalogs: CatalogSource) -> None:
        self.settings = settings
        self.catalogs = catalogs
        selector_for(settings=settings, catalog=catalogs.current())

    @property
    def catalog(self) -> Catalog:
        """The catalog as reloaded (a new revision's tool vectors are computed on its first
        turn, in the selection's worker thread)."""
        return self.catalogs.current()

    def choose(self, text: str, uicontext: dict[str, Any] | None,
               env_id: str | None = None) -> TurnTools:
        prefetch = self._prefetch_calls(text, uicontext)
        selection = get_tools_for_query(text, bool(prefetch), uicontext,
                                        settings=self.settings, catalog=self.catalog)
        explain = {**selection.explain, "prefetch": [p["args"] for p in prefetch]}
        log.debug("selected %s for %r: %s", selection.tools, text[:80], explain)
        return TurnTools(tools=list(selection.tools), prefetch=prefetch, explain=explain)

    def _prefetch_calls(self, text: str, uicontext: dict[str, Any] | None
                        ) -> list[dict[str, Any]]:
        """A `get_dashboard` call per dashboard the turn refers to (at most MAX_PREFETCH)."""
        if self.catalog.get(PREFETCH_TOOL) is None:
            return []
        refs = resolve_dashboard_refs(text, uicontext)[:MAX_PREFETCH]
        # get_dashboard reads across environments (the catalog gives it no environment).
        return [{"name": PREFETCH_TOOL, "id": "call_pf_" + uuid.uuid4().hex[:16],
                 "args": {"dashboard_id": ref}} for ref in refs]

