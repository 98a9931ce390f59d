"""Which upstream MCP tool (`<server>__<tool>`, docs/upstreams.md) a clause asks for.

The offline planner's own intents name ss-tools tools; an upstream tool is another team's, so
its words come from its name instead: a clause that names the server ("superset") and words of
the upstream tool's name ("list superset dashboards" → `superset__list_dashboards`; "superset
chart 5 data" → `superset__get_chart_data`). The server's name must be said as written: a
clause about our own tools never lands on another team's server by a shared word. The most
name words wins; on a tie, the tool whose name has fewer words.
"""

from __future__ import annotations

import re

from agentchat.agent.graph.offline.rules import normalize

SEPARATOR = "__"
_WORD = re.compile(r"[a-zа-я0-9]+")


def _same(a: str, b: str) -> bool:
    """One word in another number ("dashboard" ~ "dashboards", "charts" ~ "chart")."""
    return a.rstrip("s") == b.rstrip("s")


def upstream_intent(clause: str, available: set[str]) -> str | None:
    words = set(_WORD.findall(normalize(clause)))
    best: tuple[int, int, str] | None = None
    for name in sorted(available):
        server, sep, rest = name.partition(SEPARATOR)
        if not sep or server not in words:
            continue
        parts = [p for p in rest.split("_") if p]
        score = sum(1 for p in parts if any(_same(p, w) for w in words))
        if score and (best is None or (-score, len(parts)) < best[:2]):
            best = (-score, len(parts), name)
    return best[2] if best else None


def without_names(clause: str, tool: str) -> str:
    """The clause less the server's name and the tool's name words: what is left is what the
    user is looking for ("list superset dashboards about sales" → "about sales")."""
    server, _, rest = tool.partition(SEPARATOR)
    names = [server, *rest.split("_")]
    kept = [w for w in clause.split() if not any(_same(normalize(w).strip(".,!?"), n)
                                                 for n in names)]
    return " ".join(kept)
