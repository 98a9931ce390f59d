"""Which tools the model sees this turn, and what the agent prefetches before it (issue 7).

Prefetch is an ordinary tool call (`get_dashboard`) made by the agent before the model: it
goes through the policy gate, carries both tokens, is audited and streams tool events.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentchat.agent.selection.context import resolve_dashboard_refs
from agentchat.agent.selection.selector import Selection, ToolSelector, selector_from_settings
from agentchat.agent.settings import AgentSettings
from agentchat.catalog import Catalog

log = logging.getLogger("agentchat.agent.selection.selector")
PREFETCH_TOOL = "get_dashboard"
MAX_PREFETCH = 3


@dataclass(frozen=True)
class TurnTools:
    tools: list[str]
    prefetch: list[dict[str, Any]] = field(default_factory=list)
    explain: dict[str, Any] = field(default_factory=dict)


class TurnToolPlanner:
    """Built once at start (tool vectors computed then); `plan` runs per turn."""

    def __init__(self, settings: AgentSettings, catalog: Catalog) -> None:
        self.catalog = catalog
        self.selector: ToolSelector = selector_from_settings(settings, catalog)

    def plan(self, text: str, uicontext: dict[str, Any] | None,
             env_id: str | None = None) -> TurnTools:
        refs = resolve_dashboard_refs(text, uicontext)[:MAX_PREFETCH] if self.catalog.get(
            PREFETCH_TOOL) else []
        # get_dashboard reads across environments (the catalog gives it no environment).
        prefetch = [{"name": PREFETCH_TOOL, "id": "call_pf_" + uuid.uuid4().hex[:16],
                     "args": {"dashboard_id": ref}} for ref in refs]
        selection: Selection = self.selector.select(text, bool(prefetch), uicontext)
        explain = {**selection.explain, "prefetch": [p["args"] for p in prefetch]}
        log.debug("selected %s for %r: %s", selection.tools, text[:80], explain)
        return TurnTools(tools=list(selection.tools), prefetch=prefetch, explain=explain)
