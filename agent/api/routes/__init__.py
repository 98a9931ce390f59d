"""One router per resource (docs/protocol.md §9), collected by agent/api/main.py. Each is thin:
the work is the chat domain's door (`agentchat.agent.chat`).

    conversations.py  /api/assistant/conversations: create, list, search, rename, archive,
                      restore, append, the active branch
    history.py        /api/assistant/history: a conversation's messages and cards
    runs.py           a tab's state and its newest run; Stop by run_id
    approvals.py      /api/agent/approvals and /api/agent/grants: the approver's side
    calls.py          /api/agent/calls: an MCP call's requester's side (pending, answer)
    audit.py          /api/agent/audit: the joined audit records
    agent.py          /api/agent/*: the model's status, public keys, the selection debug view
    health.py         liveness, readiness, metrics
    ui.py             /api/agent/ui/: the people's page (web/), its config, dev tokens
"""
