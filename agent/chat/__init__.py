"""The chat domain: one submit, from an adapter's parsed request to the run whose events the
client follows. This package's `__all__` is its one public face: the door `Chat` (submit, join,
stop, and what it holds: `conversations`, `audit_log`), `Approvals` (the second door: answers
by someone else, docs/protocol.md §11), `GatedCalls` (the third: MCP calls through the gate),
and the request, run and call types the adapters need. The
adapters (agent/gradio/, agent/api/) import only these names, never a module behind them.

    facade.py        Chat: admission, attachments, which kind of submit, the lease, the run
    request.py       ChatRequest and UIContext: what a submit asks, whatever parsed it
    conversations.py Conversations: the REST list, archive (its uploads deleted) and restore,
                     history titled from the catalog, a tab's state (docs/protocol.md §4)
    audit_log.py     AuditLog: what a person may read of the audit trail
    approvals.py     Approvals: an approver's answer, the inbox, grants, the turn's resume
    gated_calls.py   GatedCalls: MCP calls through the gate (the door agent/mcp/ uses): the
                     tools a caller may call, a call, the page's answer, a stored call's result
    gated_outcomes.py  Caller and the outcomes of a call (Done, Refused, AskInline, Pending...)
    gated_cards.py   an MCP call's card: who answers it, its stored payload, its sealed
                     request_state, its audit record
    gated_tools.py   ToolLists: a caller's MCP tool list, asked of the sidecar, kept seconds
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
    sweeper.py       the replica's sweeper: settle_orphans, cut_audit, expire_uploads,
                     prune_calls (CallRetention: stored MCP calls past their retention)
    heartbeat.py     the `heartbeat` event on a silent stream (a submit's or a join's)
    notify.py        Notifications: the approvals outbox's delivery (mail.py: SMTP;
                     notice_text.py: the notice's words)

May import: graph, selection, audit, storage, agentchat. Imported by: wiring and the adapters.
"""

from agentchat.agent.chat.approvals import APPROVAL_ID, APPROVE_PATH, ApprovalAnswer, Approvals
from agentchat.agent.chat.attachments import no_links, upload_key
from agentchat.agent.chat.conversations import ActiveRun, Conversations, TabState
from agentchat.agent.chat.events import to_message
from agentchat.agent.chat.facade import Chat
from agentchat.agent.chat.gated_calls import CALL_ID, GatedCalls
from agentchat.agent.chat.gated_outcomes import (
    Answer,
    AskInline,
    Caller,
    CallOutcome,
    CallStatus,
    Denied,
    Done,
    Failed,
    Pending,
    Refused,
)
from agentchat.agent.chat.heartbeat import with_heartbeats
from agentchat.agent.chat.live_run import Run
from agentchat.agent.chat.request import ACTIONS, ID_PATTERN, ChatRequest, UIContext
from agentchat.agent.chat.upload_book import (
    FRAMING_BYTES,
    Room,
    UploadBook,
    UploadLimits,
    UploadRefused,
    check,
)
from agentchat.agent.chat.user_limits import PerMinute

__all__ = [
    "ACTIONS",
    "APPROVAL_ID",
    "APPROVE_PATH",
    "CALL_ID",
    "FRAMING_BYTES",
    "ID_PATTERN",
    "ActiveRun",
    "Answer",
    "ApprovalAnswer",
    "Approvals",
    "AskInline",
    "CallOutcome",
    "CallStatus",
    "Caller",
    "Chat",
    "ChatRequest",
    "Conversations",
    "Denied",
    "Done",
    "Failed",
    "GatedCalls",
    "Pending",
    "PerMinute",
    "Refused",
    "Room",
    "Run",
    "TabState",
    "UIContext",
    "UploadBook",
    "UploadLimits",
    "UploadRefused",
    "check",
    "no_links",
    "to_message",
    "upload_key",
    "with_heartbeats",
]
