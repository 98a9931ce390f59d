"""The `/chat` endpoint: one submit, from its inputs to the events the client sees.

    blocks.py   the Gradio Blocks mounted at /api/agent/gradio: the `/chat` API and the page
    stream.py   run_chat: parse, authenticate, limit, submit, then the turn's events
    service.py  ChatService: the conversation, the multi-tab lease, which kind of submit
    inputs.py   the seven inputs and their limits (docs/protocol.md §1)
    uploads.py  files only from Gradio's uploads, and the guard on its upload and file routes
    limits.py   per-user limits (RATE_LIMITED)
    turns.py    TurnRunner: a turn as a server-side task that outlives the connection
    recovery.py the sweeper of turns whose process died

May import: graph, selection, storage, agentchat. Imported by: wiring, main, api.
"""
