"""Tool selection (README_selection.md): which tools the model sees for one message.

    selector.py    get_tools_for_query: keywords first, an embedding fallback below 3 tools
    keywords.py    the keyword matcher (word forms, typos)
    embeddings.py  the fallback's embedding backends (USE, e5, an OpenAI-compatible endpoint)
    context.py     dashboards a message or the UIContext refers to (the prefetch)
    text.py        normalisation shared by the above
    turn_tools.py  one turn's offered tools and prefetch calls

May import: agentchat (catalog). Imported by: chat, wiring, the debug route.
"""
