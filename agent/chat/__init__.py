"""The `/chat` endpoint: one submit, from its inputs to the events the client sees.

    blocks.py   the Gradio Blocks mounted at /api/agent/gradio: the `/chat` API and the page
    stream.py   run_chat: parse, authenticate, limit, submit or join, then follow the run
    service.py  ChatService: the conversation, the tab's lease (Stop then send), which kind
                of submit
    events.py   the events as ChatMessage dicts (to_message) and the text coalescing
    runs.py     RunHub: each submit's run, its events in memory and in PostgreSQL (one writer
                per replica), heartbeats, RUN_LOST, AGENT_SATURATED
    join.py     action "join": a run's events after last_seq, then live (LISTEN or polling)
    heartbeat.py the `heartbeat` event on a silent stream (a submit's or a join's)
    inputs.py   the seven inputs and their limits (docs/protocol.md §1)
    uploads.py  files only from Gradio's uploads, and the guard on its upload and file routes
    upload_quota.py  who holds which upload, the quotas on the upload route, their expiry
    sessions.py Gradio's own routes owner-checked: sessions, events, uploads are the caller's
    limits.py   per-user limits (RATE_LIMITED): runs, streams, submits; PerMinute, the window
    turns.py    TurnRunner: a turn as a server-side task that outlives the connection
    recovery.py the sweeper of turns whose process died (and of expired uploads)

May import: graph, selection, storage, agentchat. Imported by: wiring, main, api.
"""
