"""The chat domain: one submit, from an adapter's parsed request to the run whose events the
client follows. Its door is `facade.Chat` (`submit(request, principal) -> Run`, `join`); the
adapters (agent/gradio/, agent/api/) never reach past it.

    facade.py        Chat: admission, attachments, which kind of submit, the lease, the run
    request.py       ChatRequest and UIContext: what a submit asks, whatever parsed it
    turn_starts.py   the one way a turn starts: a message, a card's resume, a retry, a fork
    forks.py         branches in the graph's thread: a fork's checkpoint, a switch
    card_answers.py  a card's answer: the re-check, the card, its audit rows, one transaction
    turn_task.py     TurnRunner: a turn as a server-side task that outlives the connection
    run_hub.py       RunHub: each submit's run, its events in memory and in PostgreSQL (one
                     writer per replica), heartbeats, the epoch fence, RUN_LOST, AGENT_SATURATED
    live_run.py      Run: one run's events as a replica keeps them, and its followers
    takeover.py      Takeover: a dead or draining replica's runs go on here (run_resumed)
    join.py          action "join": a run's events after last_seq, then live (LISTEN or polling)
    events.py        the events as ChatMessage dicts (to_message); a queued backlog joined
    turn_text.py     TurnText: a turn's text coalesced as it is written (one stream_token a
                     flush interval)
    user_limits.py   per-user limits (RATE_LIMITED): runs, streams, submits; PerMinute
    attachments.py   files attached to a message: Gradio's upload folder, who owns each upload,
                     reading one safely, expiry and deletion
    upload_book.py   the owners' book and the upload quotas' room (the route's counting is
                     agent/gradio/upload_quota.py)
    sweeper.py       the replica's sweeper: settle_orphans, cut_audit, expire_uploads
    heartbeat.py     the `heartbeat` event on a silent stream (a submit's or a join's)

May import: graph, selection, audit, storage, agentchat. Imported by: wiring and the adapters.
"""
