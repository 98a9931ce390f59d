"""Which tools the model sees this turn, and what the agent prefetches before it
(agent/README_selection.md).

Prefetch is an ordinary tool call (`get_dashboard`) made by the agent before the model: it
goes through the policy gate, carries both tokens, is audited and streams tool events.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentchat.agent.selection.context import resolve_dashboard_refs
from agentchat.agent.selection.selector import get_tools_for_query, selector_for
from agentchat.agent.settings import AgentSettings
from agentchat.catalog import Catalog, Tool
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

    def __init__(self, settings: AgentSettings, catalogs: CatalogSource,
                 offered: Callable[[Tool], bool] | None = None) -> None:
        self.settings = settings
        self.catalogs = catalogs
        # Whether a catalog tool may be offered at all (an upstream tool in quarantine may
        # not: agent/gate/upstream_pins.py, wired in by agent/wiring.py).
        self.offered = offered
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
        tools = list(selection.tools)
        if self.offered is not None:
            catalog = self.catalog
            withheld = [n for n in tools if (t := catalog.get(n)) and not self.offered(t)]
            tools = [n for n in tools if n not in withheld]
            if withheld:
                explain["withheld"] = withheld
        log.debug("selected %s for %r: %s", tools, text[:80], explain)
        return TurnTools(tools=tools, prefetch=prefetch, explain=explain)

    def _prefetch_calls(self, text: str, uicontext: dict[str, Any] | None
                        ) -> list[dict[str, Any]]:
        """A `get_dashboard` call per dashboard the turn refers to (at most MAX_PREFETCH)."""
        if self.catalog.get(PREFETCH_TOOL) is None:
            return []
        refs = resolve_dashboard_refs(text, uicontext)[:MAX_PREFETCH]
        # get_dashboard reads across environments (the catalog gives it no environment).
        return [{"name": PREFETCH_TOOL, "id": "call_pf_" + uuid.uuid4().hex[:16],
                 "args": {"dashboard_id": ref}} for ref in refs]

