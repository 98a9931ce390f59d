"""The agent's own tables (`agentchat/migrations.py`), one storage layer for /chat and REST.

- `db.py`: the query helper (`fetch_one`, `fetch_all`, `execute`, `connection`) on a pool or
  a connection; outages become STORAGE_UNAVAILABLE; `not_found()`.
- `conversations.py` (conversations, conversation_terms): create, get, rename, archive,
  restore, list and search; the title rule (`title_from`).
- `turns.py` (turns, messages, tool_calls): a turn's record and its end in one statement
  (`end_turn`: answer, status, the conversation's activity), the orphan sweep, the REST
  append, closing the calls left running.
- `confirmations.py` (confirmations): the cards, pending and resolved.
- `leases.py` (leases): the multi-tab gate, and the owner's lease for `/active`.
- `runs.py` (runs, run_events): a run's events in batches with NOTIFY, heartbeats, marking
  runs lost (with their RUN_LOST event and failed turn), the owner's run for a join.
- `takeovers.py` (runs): claiming a dead or released run (its epoch raised), the runs none
  can go on with, a draining replica's release, the turn a claimed run goes on with.
- `history.py` (reads messages, turns, tool_calls, confirmations): history pages and which
  message each card hangs on.
- `branches.py` (messages, conversations, turns, tool_calls; protocol.md §4): the message tree,
  the active branch, siblings, where an edit or a regenerate forks and what the abandoned
  branch executed, the branch through a message.
- `submits.py` (conversations, leases, turns, messages, confirmations, runs): a submit's rows
  before its turn starts, in one transaction: a new conversation in one statement, a message
  in one round trip, a card's answer or a retry opened under the conversation's lock.
- `fencing.py` (runs): every side effect of a run fenced by its epoch (`RunFence`, `OWNED`).
- `turn_plans.py` (turn_plans): a step that plans a write, stored fenced before it runs.
- `sealing.py` (runs.resume_token): the user token a live run keeps for its takeover, sealed.
- `approvals.py` (approvals, approval_answers; the cards through `approval_cards`): approvals
  by someone else, a chat card's or a stored call's, their answers, the inbox.
- `grants.py` (approval_grants): time-boxed grants, live until expiry or revoke.
- `gated_call_rows.py` (gated_calls): calls from outside a chat (MCP) waiting for a person,
  claimed once, read by their owner only.
- `outbox.py` (approval_outbox): the approvals' notifications, claimed and delivered at least
  once.
- `quarantine.py` (upstream_quarantine): upstream MCP tools whose served definition fails
  their pin, shared by every replica, with the evidence; lifted when served as pinned again.

Rules: functions take `db` (the pool, or the connection the caller holds) first; SQL is an
UPPER_SNAKE constant next to the function that runs it. Every statement a user reaches with a
conversation id names the owner in its SQL (`WHERE id = %(id)s AND owner = %(owner)s`): another
user's conversation is NOT_FOUND like a missing one, never fetched and compared in Python. A
turn's own writes then use the id that check returned. Rows are plain dicts; keys, not cursors,
go in and out (the API encodes them). The per-conversation advisory lock is
`agentchat.db.conversation_lock` (the pruner shares it).

What it may import: agent/README.md, "Module map" (tests/core/import_rules.py): psycopg, the
shared floor (`agentchat`, the agent's settings for the resume keys) and each other; nothing
from `chat/`, `graph/`, `audit/` or the adapters.
"""
