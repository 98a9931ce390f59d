"""Our own tables, as an append-only list of migrations (the index is the version).

Never edit or reorder an applied entry: add a new one. A retired entry becomes "SELECT 1;".
LangGraph's checkpoint tables are not ours; `AsyncPostgresSaver.setup()` owns them.

An entry is SQL run in one transaction of its own, or `Online` statements run one by one
outside any transaction (`CREATE INDEX CONCURRENTLY` cannot run in one), each idempotent so a
retry after a lock timeout resumes where it stopped (agentchat/db.py runs them, with
`lock_timeout` and `statement_timeout` set). A table that serving pods write to is changed only
online: an `ALTER TABLE` that needs a brief ACCESS EXCLUSIVE lock, and indexes built
concurrently.
"""

from __future__ import annotations

from agentchat.schema_base import FIRST_ELEVEN, Online

__all__ = ["MIGRATIONS", "Online"]


MIGRATIONS: list[str | Online] = [
    *FIRST_ELEVEN,  # 0-10
    # 11: edit and regenerate (issue 35): a conversation is a tree of messages. `parent_id`
    # is the message before it on its branch ('' for a branch's first message; NULL on rows
    # stored before, which continue the line before them); `leaf_id` is the active branch's
    # last message (NULL: the newest message); `forked_at` its first fork (the pruner never
    # compacts a conversation with branches). Nullable, no default: catalog changes only,
    # each a brief lock taken online (serving pods write to both tables).
    Online((
        "ALTER TABLE messages ADD COLUMN IF NOT EXISTS parent_id text",
        "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS leaf_id text",
        "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS forked_at timestamptz",
    )),
    # 12: approvals by someone else (issue 34, docs/protocol.md §11): a card whose policy mode is
    # `other` is an approval; each approver's answer is a row of its own (one per person).
    """
    CREATE TABLE IF NOT EXISTS approvals (
        approval_id      text PRIMARY KEY REFERENCES confirmations(confirm_id) ON DELETE CASCADE,
        conversation_id  text NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        requester        text NOT NULL,
        tool             text NOT NULL,
        environment      text,
        args_digest      text NOT NULL,
        approvers        jsonb NOT NULL,          -- the roles that may approve
        quorum           int NOT NULL,
        rule             jsonb NOT NULL,          -- the sidecar's `approval` object
        tab_id           text,                    -- the requester's tab: the resume's lease
        status           text NOT NULL DEFAULT 'pending',  -- pending | approved | denied
        created_at       timestamptz NOT NULL DEFAULT now(),
        expires_at       timestamptz NOT NULL,
        decided_at       timestamptz,
        escalate_at      timestamptz,             -- null: never escalated
        escalated_at     timestamptz,
        expired_notified_at timestamptz
    );
    CREATE INDEX IF NOT EXISTS approvals_inbox ON approvals (created_at DESC, approval_id DESC);
    CREATE TABLE IF NOT EXISTS approval_answers (
        approval_id      text NOT NULL REFERENCES approvals(approval_id) ON DELETE CASCADE,
        approver         text NOT NULL,
        decision         text NOT NULL,           -- approve | deny
        comment          text NOT NULL DEFAULT '',
        channel          text NOT NULL,           -- rest | panel
        decision_id      text,                    -- the sidecar's check of the approver
        grant_minutes    int,                     -- a time-boxed grant asked with it
        at               timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (approval_id, approver)
    );
    -- The notifications' outbox: written in the approval's transaction, delivered at least
    -- once by any replica (its id in the body for deduplication); `channels` still to do.
    CREATE TABLE IF NOT EXISTS approval_outbox (
        id               text PRIMARY KEY,
        approval_id      text NOT NULL,           -- no foreign key: it outlives the approval
        event            text NOT NULL,
        body             jsonb NOT NULL,
        channels         text[] NOT NULL,         -- webhook, email: those not yet delivered
        attempts         int NOT NULL DEFAULT 0,
        next_at          timestamptz NOT NULL DEFAULT now(),
        delivered_at     timestamptz,
        sent             jsonb NOT NULL DEFAULT '[]',  -- what went where, for the audit
        last_error       text,
        created_at       timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX IF NOT EXISTS approval_outbox_due ON approval_outbox (next_at)
        WHERE delivered_at IS NULL;
    -- Time-boxed grants: the requester's calls of this tool, environment and object need no
    -- second approval until expires_at (or a revoke).
    CREATE TABLE IF NOT EXISTS approval_grants (
        grant_id         text PRIMARY KEY,
        approval_id      text NOT NULL,
        requester        text NOT NULL,
        tool             text NOT NULL,
        environment      text,
        object_key       text NOT NULL,
        granted_by       text NOT NULL,
        created_at       timestamptz NOT NULL DEFAULT now(),
        expires_at       timestamptz NOT NULL,
        revoked_at       timestamptz
    );
    CREATE INDEX IF NOT EXISTS approval_grants_live
        ON approval_grants (requester, tool, object_key) WHERE revoked_at IS NULL;
    """,
    # 13: a run survives its replica (issue 33, docs/protocol.md §4 "Takeover"). `epoch` fences
    # a run's writes (a replica whose epoch is stale stores nothing more for it); `attempt`
    # counts takeovers (the first run is 1); `resumed_after` is the last stored seq the latest
    # attempt went on from; `resume_token` the user token a new owner resumes the run with,
    # cleared when the run ends. `replica` '' is a run released by a draining replica. Online:
    # columns with constant defaults (no rewrite) and an index built concurrently.
    Online((
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS epoch integer NOT NULL DEFAULT 1",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 1",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS resumed_after integer",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS resume_token text",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_claimable ON runs (heartbeat_at)"
        " WHERE status IN ('running', 'resuming')",
    )),
    # 14: the planned calls are durable before any write runs (docs/protocol.md §4,
    # "Takeover"): a model step that proposed a write, and the turn's model steps before it,
    # by turn and step (the thread's length when the model was asked: the step its call ids
    # derive from). A takeover's model node returns the stored message rather than asking the
    # model again, so the write keeps its calls' ids and idempotency keys. Kept with its turn.
    """
    CREATE TABLE IF NOT EXISTS turn_plans (
        turn_id          text NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
        step             integer NOT NULL,
        message          jsonb NOT NULL,          -- the AIMessage, langchain's message_to_dict
        created_at       timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (turn_id, step)
    );
    """,
]
