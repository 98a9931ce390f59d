"""Tool selection (README_selection.md): which tools the model sees for one message.

    selector.py    get_tools_for_query: keywords first, an embedding fallback below 3 tools
    keywords.py    the keyword matcher (word forms, typos)
    embeddings.py  the fallback's embedding backends (USE, e5, an OpenAI-compatible endpoint)
    context.py     dashboards a message or the UIContext refers to (the prefetch)
    text.py        normalisation shared by the above
    turn_tools.py  one turn's offered tools and prefetch calls

What it may import: agent/README.md, "Module map" (tests/core/import_rules.py): the shared
floor only (agentchat's catalog, the agent's settings).
"""
