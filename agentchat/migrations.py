"""Our own tables, as an append-only list of migrations (the index is the version).

Never edit or reorder an applied entry: add a new one. A retired entry becomes "SELECT 1;".
LangGraph's checkpoint tables are not ours; `AsyncPostgresSaver.setup()` owns them.

An entry is SQL run in one transaction of its own, or `Online` statements run one by one
outside any transaction (`CREATE INDEX CONCURRENTLY` cannot run in one), each idempotent so a
retry after a lock timeout resumes where it stopped (agentchat/db.py runs them, with
`lock_timeout` and `statement_timeout` set). A table that serving pods write to is changed only
online: an `ALTER TABLE` that needs a brief ACCESS EXCLUSIVE lock, and indexes built
concurrently.

One list in one file, past the ~400 lines a module keeps to: append-only data is exempt
(docs/architecture.md, "Storage"), and a version is its index here, read in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIGRATIONS", "Online"]


@dataclass(frozen=True)
class Online:
    """Statements run one at a time in autocommit, never inside a transaction."""

    statements: tuple[str, ...]


MIGRATIONS: list[str | Online] = [
    # 0: conversations and their turns, messages, tool calls, confirmations and leases.
    """
    CREATE TABLE IF NOT EXISTS conversations (
        id               text PRIMARY KEY,              -- the LangGraph thread_id
        owner            text NOT NULL,                 -- the user JWT's sub
        title            text NOT NULL DEFAULT '',
        created_at       timestamptz NOT NULL DEFAULT now(),
        last_activity_at timestamptz NOT NULL DEFAULT now(),
        is_archived      boolean NOT NULL DEFAULT false,
        archived_at      timestamptz
    );
    CREATE INDEX IF NOT EXISTS conversations_owner_activity
        ON conversations (owner, last_activity_at DESC, id DESC);

    CREATE TABLE IF NOT EXISTS turns (
        id               text PRIMARY KEY,
        conversation_id  text NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        status           text NOT NULL DEFAULT 'running',
            -- running | awaiting_confirmation | completed | partial | failed
        error_code       text,
        started_at       timestamptz NOT NULL DEFAULT now(),
        finished_at      timestamptz
    );
    CREATE INDEX IF NOT EXISTS turns_conversation ON turns (conversation_id, started_at);

    CREATE TABLE IF NOT EXISTS messages (
        id               text PRIMARY KEY,              -- client id or the final event's message_id
        conversation_id  text NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn_id          text REFERENCES turns(id) ON DELETE SET NULL,
        role             text NOT NULL CHECK (role IN ('user', 'assistant')),
        content          text NOT NULL,
        partial          boolean NOT NULL DEFAULT false,
        created_at       timestamptz NOT NULL DEFAULT now(),
        pos              bigserial
    );
    CREATE INDEX IF NOT EXISTS messages_conversation_pos ON messages (conversation_id, pos DESC);

    CREATE TABLE IF NOT EXISTS tool_calls (
        conversation_id  text NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        call_id          text NOT NULL,
        turn_id          text REFERENCES turns(id) ON DELETE SET NULL,
        tool             text NOT NULL,
        input            jsonb NOT NULL DEFAULT '{}',
        output           jsonb,
        outcome          text NOT NULL DEFAULT 'running',
            -- running | ok | error | timeout | denied | cancelled
        error            text,
        attempts         integer NOT NULL DEFAULT 0,
        started_at       timestamptz NOT NULL DEFAULT now(),
        finished_at      timestamptz,
        PRIMARY KEY (conversation_id, call_id)
    );
    CREATE INDEX IF NOT EXISTS tool_calls_turn ON tool_calls (turn_id);

    CREATE TABLE IF NOT EXISTS confirmations (
        confirm_id       text PRIMARY KEY,
        conversation_id  text NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn_id          text REFERENCES turns(id) ON DELETE SET NULL,
        call_id          text NOT NULL,
        payload          jsonb NOT NULL,                -- the confirm_required card
        status           text NOT NULL DEFAULT 'pending',
            -- pending | confirmed | denied | expired
        created_at       timestamptz NOT NULL DEFAULT now(),
        expires_at       timestamptz NOT NULL,
        resolved_at      timestamptz
    );
    CREATE INDEX IF NOT EXISTS confirmations_pending
        ON confirmations (conversation_id) WHERE status = 'pending';

    CREATE TABLE IF NOT EXISTS leases (
        conversation_id  text PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
        session_id       text NOT NULL,
        until            timestamptz NOT NULL
    );
    """,
    # 1: the Conversations REST API. Search: one tsvector per message under the `russian`
    # configuration, which stems Cyrillic words with russian_stem and ASCII words with
    # english_stem, so one column and one GIN index serve both languages. Stored (not an
    # expression index) so a per-conversation recheck reads it instead of re-parsing text.
    # messages_turn: history attaches each turn's tool calls and cards to its messages.
    # conversations_owner_live: the default list (archived hidden) walks this keyset index.
    """
    ALTER TABLE messages ADD COLUMN IF NOT EXISTS tsv tsvector
        GENERATED ALWAYS AS (to_tsvector('russian'::regconfig, content)) STORED;
    CREATE INDEX IF NOT EXISTS messages_tsv ON messages USING gin (tsv);
    CREATE INDEX IF NOT EXISTS messages_turn ON messages (turn_id);
    CREATE INDEX IF NOT EXISTS confirmations_turn ON confirmations (turn_id);
    CREATE INDEX IF NOT EXISTS conversations_owner_live
        ON conversations (owner, last_activity_at DESC, id DESC) WHERE NOT is_archived;
    """,
    # 2: search's worst case (a user with 500 conversations searching a word none of their
    # messages hold, so every conversation is checked): the per-conversation check reads
    # tsv from this index alone instead of the heap: 115 ms -> 30 ms at 1M messages, for
    # 176 MB of index (bench/rest_conversations.py, agent/README_rest.md).
    """
    CREATE INDEX IF NOT EXISTS messages_conversation_tsv ON messages (conversation_id)
        INCLUDE (tsv);
    """,
    # 3: retire 2's covering index. A btree entry holds at most 2704 bytes, so a message whose
    # tsvector is larger (a long answer, a 16 KB message) could not be stored at all: the
    # reliability tests lost a 300-word answer to "index row size exceeds btree maximum". The
    # per-conversation search check reads tsv from the heap again (2's worst case goes back).
    """
    DROP INDEX IF EXISTS messages_conversation_tsv;
    """,
    # 4: retired (owner-prefixed lexemes on every message, one GIN over them). It found a
    # word absent from a heavy user's messages in 3 ms, but a word in a quarter of their
    # 50,000 messages took 11-23 ms: each matching message was read to learn its conversation.
    # 5 replaces it and drops what it made.
    "SELECT 1;",
    # 5: conversation search on the conversation's vocabulary. `conversation_terms` holds each
    # conversation's lexemes once (a row per message that brought new ones, filled by an AFTER
    # INSERT trigger, so every writer stays as it is), prefixed with a hash of the owner
    # ("3d517fe6ebab7b8c/энерг") so one GIN lookup returns only that user's conversations
    # that use the word: at most one row per conversation, however many messages repeat it.
    # `owner_search(owner, q)` evaluates the websearch query on each such conversation's words
    # (words anywhere in the conversation; a quoted phrase is matched as its words).
    # The hash is only an index key: the list still filters conversations by owner.
    # Messages are append-only, so terms are only ever added.
    r"""
    CREATE OR REPLACE FUNCTION owner_lexeme_prefix(owner text) RETURNS text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT left(md5(owner), 16) || '/' $$;
    CREATE OR REPLACE FUNCTION owner_terms(owner text, content text) RETURNS text[]
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT ARRAY(SELECT owner_lexeme_prefix(owner) || lexeme
                             FROM unnest(tsvector_to_array(
                                      to_tsvector('russian'::regconfig, content))) AS lexeme) $$;
    -- The query with the same prefixes; phrases become AND (the terms keep no positions).
    -- Lexemes are single-quoted in the text form of a tsquery ('' inside).
    CREATE OR REPLACE FUNCTION owner_tsquery(owner text, q text) RETURNS tsquery
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT regexp_replace(
                       regexp_replace(websearch_to_tsquery('russian'::regconfig, q)::text,
                                      $re$'((?:[^']|'')*)'$re$,
                                      '''' || owner_lexeme_prefix(owner) || '\1''', 'g'),
                       '<[0-9-]+>', '&', 'g')::tsquery $$;

    CREATE TABLE IF NOT EXISTS conversation_terms (
        conversation_id  text NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        terms            tsvector NOT NULL
    );
    CREATE INDEX IF NOT EXISTS conversation_terms_conversation
        ON conversation_terms (conversation_id);

    CREATE OR REPLACE FUNCTION messages_terms() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO conversation_terms (conversation_id, terms)
        SELECT NEW.conversation_id, array_to_tsvector(fresh)
          FROM (SELECT ARRAY(
                    SELECT unnest(owner_terms(
                        (SELECT owner FROM conversations WHERE id = NEW.conversation_id),
                        NEW.content))
                    EXCEPT
                    SELECT unnest(tsvector_to_array(t.terms))
                      FROM conversation_terms t WHERE t.conversation_id = NEW.conversation_id)
                AS fresh) new_terms
         WHERE cardinality(fresh) > 0;
        RETURN NULL;
    END $$;
    DROP TRIGGER IF EXISTS messages_terms ON messages;
    CREATE TRIGGER messages_terms AFTER INSERT ON messages
        FOR EACH ROW EXECUTE FUNCTION messages_terms();
    INSERT INTO conversation_terms (conversation_id, terms)
    SELECT m.conversation_id, array_to_tsvector(array_agg(DISTINCT term))
      FROM messages m JOIN conversations c ON c.id = m.conversation_id,
           unnest(owner_terms(c.owner, m.content)) AS term
     WHERE NOT EXISTS (SELECT 1 FROM conversation_terms t
                        WHERE t.conversation_id = m.conversation_id)
     GROUP BY m.conversation_id;
    CREATE INDEX IF NOT EXISTS conversation_terms_search
        ON conversation_terms USING gin (terms);

    -- The conversations of `owner` whose words satisfy `q`: per lexeme of the query, one GIN
    -- lookup; per conversation, the query evaluated on the query's words it has.
    CREATE OR REPLACE FUNCTION owner_search(owner text, q text) RETURNS SETOF text
        LANGUAGE sql STABLE PARALLEL SAFE
        AS $$
        WITH query AS (SELECT owner_tsquery(owner, q) AS tq),
             lexeme AS (SELECT DISTINCT m[1] AS quoted
                          FROM query,
                               regexp_matches(query.tq::text, $re$('(?:[^']|'')*')$re$, 'g') AS m)
        SELECT t.conversation_id
          FROM lexeme JOIN conversation_terms t ON t.terms @@ lexeme.quoted::tsquery
         GROUP BY t.conversation_id
        HAVING string_agg(DISTINCT lexeme.quoted, ' ')::tsvector @@ (SELECT tq FROM query) $$;

    -- What 1 and 4 made for search.
    DROP TRIGGER IF EXISTS messages_search ON messages;
    DROP FUNCTION IF EXISTS messages_search();
    DROP INDEX IF EXISTS messages_search;
    ALTER TABLE messages DROP COLUMN IF EXISTS search;
    DROP FUNCTION IF EXISTS owner_tsvector(text, text);
    DROP INDEX IF EXISTS messages_tsv;
    ALTER TABLE messages DROP COLUMN IF EXISTS tsv;
    """,
    # 6: what a turn offered the model (its tools, environment and UIContext), so a resume or
    # a retry gates the calls against the same set instead of re-planning without the context.
    """
    ALTER TABLE turns ADD COLUMN IF NOT EXISTS plan jsonb;
    """,
    # 7: runs (docs/protocol.md §4, "Runs"). Every streaming submit is a run of its turn; its events
    # are kept in order (as sent: a stream_token carries the whole answer so far) so a client
    # can rejoin on any replica. The replica heartbeats its live runs; any replica marks a run
    # without a heartbeat `lost`. Expand-only: older replicas ignore both tables.
    """
    CREATE TABLE IF NOT EXISTS runs (
        id               text PRIMARY KEY,
        conversation_id  text NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn_id          text NOT NULL,
        kind             text NOT NULL,           -- message | confirm | deny | retry
        tab_id           text NOT NULL,
        replica          text NOT NULL,
        status           text NOT NULL DEFAULT 'running',
            -- running | completed | awaiting_confirmation | failed | cancelled | lost
        last_seq         integer NOT NULL DEFAULT 0,
        first_kept_seq   integer NOT NULL DEFAULT 1,
        started_at       timestamptz NOT NULL DEFAULT now(),
        heartbeat_at     timestamptz NOT NULL DEFAULT now(),
        finished_at      timestamptz
    );
    CREATE INDEX IF NOT EXISTS runs_conversation ON runs (conversation_id, started_at DESC);
    CREATE INDEX IF NOT EXISTS runs_live ON runs (heartbeat_at) WHERE status = 'running';
    CREATE TABLE IF NOT EXISTS run_events (
        run_id           text NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        seq              integer NOT NULL,
        event            jsonb NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    """,
    # 8: pruning that scales (the operator's pruner, operator/pruning.py). Each rule walks its
    # own index in key order, so a batch costs the same at any table size:
    # - conversations_prune_activity: threads inactive past retention (delete);
    # - conversations_prune_archived: archived threads past retention (delete);
    # - conversations_prune_uncompacted: idle threads with activity since their last compaction
    #   (keep_latest). `compacted_activity_at` is the last_activity_at a thread had when the
    #   pruner last compacted it, so a compacted thread leaves the index until it is used again,
    #   instead of being probed for checkpoints at every run. Expand-only.
    #   Online (README.md, "Upgrading (day two)"): the first form was one transaction with
    #   three plain CREATE INDEX, which held writes to `conversations` for the whole build
    #   and, behind an old pod's transaction, crash-looped the upgrade. Same column and
    #   indexes, so a database that applied the first form is unchanged.
    Online((
        "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS compacted_activity_at timestamptz",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS conversations_prune_activity"
        " ON conversations (last_activity_at, id)",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS conversations_prune_archived"
        " ON conversations (archived_at, id) WHERE is_archived",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS conversations_prune_uncompacted"
        " ON conversations (last_activity_at, id)"
        " WHERE compacted_activity_at IS NULL OR compacted_activity_at < last_activity_at",
    )),
    # 9: the audit trail (agent/audit/). One row per stage of a write or destructive
    # call, hash-chained at insert time: `seq` is the chain's order, `hash` covers every other
    # column and `prev_hash` (agent/audit/chain.py). `audit_head` is the chain's one head row
    # (its last seq and hash, updated with every append under the audit advisory lock) and its
    # anchor (the last row a retention cut deleted; GENESIS before any). The trigger refuses
    # UPDATE and TRUNCATE of rows, and DELETE outside the retention cut (which sets
    # `agentchat.audit_cut` in its transaction): the code has no other path, and a mistake in
    # SQL is refused rather than silently breaking the chain. The joined record per call is
    # the `audit_records` view. Expand-only.
    """
    CREATE TABLE IF NOT EXISTS audit_rows (
        seq              bigint PRIMARY KEY,
        at               timestamptz NOT NULL,
        stage            text NOT NULL,  -- decision | card | answer | execution | not_run
        conversation_id  text NOT NULL,
        owner            text NOT NULL,
        turn_id          text NOT NULL,
        call_id          text NOT NULL,
        tool             text NOT NULL,
        environment      text,
        args_hash        text NOT NULL,
        detail           jsonb NOT NULL,
        prev_hash        text NOT NULL,
        hash             text NOT NULL
    );
    CREATE INDEX IF NOT EXISTS audit_rows_call ON audit_rows (conversation_id, call_id, seq);
    CREATE INDEX IF NOT EXISTS audit_rows_owner ON audit_rows (owner, seq);
    CREATE INDEX IF NOT EXISTS audit_rows_at ON audit_rows (at);
    CREATE TABLE IF NOT EXISTS audit_head (
        id               boolean PRIMARY KEY DEFAULT true CHECK (id),
        seq              bigint NOT NULL,
        hash             text NOT NULL,
        anchor_seq       bigint NOT NULL,
        anchor_hash      text NOT NULL,
        anchor_at        timestamptz
    );
    INSERT INTO audit_head (seq, hash, anchor_seq, anchor_hash)
    VALUES (0, 'sha256:' || repeat('0', 64), 0, 'sha256:' || repeat('0', 64))
    ON CONFLICT (id) DO NOTHING;
    CREATE OR REPLACE FUNCTION audit_rows_guard() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND current_setting('agentchat.audit_cut', true) = 'on' THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit rows are append-only (% refused)', TG_OP;
    END $$;
    DROP TRIGGER IF EXISTS audit_rows_append_only ON audit_rows;
    CREATE TRIGGER audit_rows_append_only BEFORE UPDATE OR DELETE ON audit_rows
        FOR EACH ROW EXECUTE FUNCTION audit_rows_guard();
    DROP TRIGGER IF EXISTS audit_rows_no_truncate ON audit_rows;
    CREATE TRIGGER audit_rows_no_truncate BEFORE TRUNCATE ON audit_rows
        FOR EACH STATEMENT EXECUTE FUNCTION audit_rows_guard();
    CREATE OR REPLACE VIEW audit_records AS
    SELECT conversation_id, call_id,
           min(seq) AS first_seq, max(seq) AS last_seq,
           min(at) AS started_at, max(at) AS updated_at,
           (array_agg(owner ORDER BY seq))[1] AS owner,
           (array_agg(turn_id ORDER BY seq))[1] AS turn_id,
           (array_agg(tool ORDER BY seq))[1] AS tool,
           (array_agg(environment ORDER BY seq))[1] AS environment,
           (array_agg(args_hash ORDER BY seq))[1] AS args_hash,
           (array_agg(detail->>'decision_id' ORDER BY seq DESC)
               FILTER (WHERE stage = 'decision'))[1] AS decision_id,
           (array_agg(CASE stage WHEN 'execution' THEN detail->>'outcome'
                                 WHEN 'not_run' THEN 'not_run:' || (detail->>'reason') END
                      ORDER BY seq DESC)
               FILTER (WHERE stage IN ('execution', 'not_run')))[1] AS outcome,
           jsonb_agg(jsonb_build_object('seq', seq, 'at', at, 'stage', stage, 'detail', detail,
                                        'prev_hash', prev_hash, 'hash', hash)
                     ORDER BY seq) AS stages
      FROM audit_rows
     GROUP BY conversation_id, call_id;
    """,
    # 10: Stop by run_id from any replica (docs/protocol.md §4): the replica asked marks the
    # run, and the replica running it reads the mark with its next heartbeat and stops it. A
    # nullable column without a default: a change of the catalog only, no table rewrite.
    """
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS stop_requested_at timestamptz;
    """,
    # 11: edit and regenerate (docs/protocol.md §4, "Branches"): a conversation is a tree of
    # messages. `parent_id` is the message before it on its branch ('' for a branch's first message;
    # NULL on rows stored before, which continue the line before them); `leaf_id` is the active
    # branch's last message (NULL: the newest message); `forked_at` its first fork (the pruner never
    # compacts a conversation with branches). Nullable, no default: catalog changes only, each a
    # brief lock taken online (serving pods write to both tables).
    Online((
        "ALTER TABLE messages ADD COLUMN IF NOT EXISTS parent_id text",
        "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS leaf_id text",
        "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS forked_at timestamptz",
    )),
    # 12: approvals by someone else (docs/protocol.md §11): a card whose policy mode is
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
    # 13: a run survives its replica (docs/protocol.md §4 "Takeover"). `epoch` fences
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
    # 15: calls from outside a chat (an MCP client, agent/chat/gated_calls.py) that wait for
    # a person: one row per call, its own record (`call_id`, `mcp-<uuid>`, is also its audit
    # record's conversation and its approval's id). An approval by someone else of such a call
    # is an approval like any other, so `approvals` no longer needs a card row or a
    # conversation: its two foreign keys go (an approval still goes with its conversation: a
    # trigger deletes it, as the cascade did), and `approval_cards` is where the approvals'
    # SQL reads a card, a chat card's or a stored call's. Online: a new table, a view, and
    # foreign keys dropped after the trigger that replaces their cascade is in place, each a
    # brief lock (serving pods write to `approvals` and `conversations`).
    Online((
        """CREATE TABLE IF NOT EXISTS gated_calls (
            call_id          text PRIMARY KEY,
            owner            text NOT NULL,           -- the requester's sub
            channel          text NOT NULL,           -- mcp
            tool             text NOT NULL,
            environment      text,
            arguments        jsonb NOT NULL,          -- as validated: what runs
            args_digest      text NOT NULL,
            ask              text NOT NULL,           -- inline | confirmation | approval
            card             jsonb NOT NULL,          -- what the person is asked
            client           jsonb NOT NULL,          -- azp, and the client's own words
            status           text NOT NULL DEFAULT 'pending',
                -- pending | running | done | failed | denied (expired: pending past expires_at)
            decision_id      text,                    -- the decision it ran under
            result           jsonb,
            error            text,
            created_at       timestamptz NOT NULL DEFAULT now(),
            expires_at       timestamptz NOT NULL,
            answered_at      timestamptz,
            finished_at      timestamptz
        )""",
        "CREATE INDEX IF NOT EXISTS gated_calls_owner ON gated_calls (owner, created_at DESC)",
        """CREATE OR REPLACE FUNCTION approvals_follow_conversation() RETURNS trigger
           LANGUAGE plpgsql AS $$
           BEGIN
               DELETE FROM approvals WHERE conversation_id = OLD.id;
               RETURN OLD;
           END $$""",
        "DROP TRIGGER IF EXISTS approvals_follow_conversation ON conversations",
        "CREATE TRIGGER approvals_follow_conversation AFTER DELETE ON conversations"
        " FOR EACH ROW EXECUTE FUNCTION approvals_follow_conversation()",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS approvals_conversation"
        " ON approvals (conversation_id)",
        "ALTER TABLE approvals DROP CONSTRAINT IF EXISTS approvals_approval_id_fkey",
        "ALTER TABLE approvals DROP CONSTRAINT IF EXISTS approvals_conversation_id_fkey",
        """CREATE OR REPLACE VIEW approval_cards AS
           SELECT confirm_id, payload, status, expires_at, turn_id, call_id, false AS gated
             FROM confirmations
           UNION ALL
           SELECT call_id, card, CASE WHEN status IN ('pending', 'denied') THEN status
                                      ELSE 'confirmed' END,
                  expires_at, NULL, call_id, true
             FROM gated_calls WHERE ask = 'approval'""",
    )),
    # 16: MCP calls are bounded (agent/storage/gated_call_rows.py): a user's pending calls are
    # counted when one is stored (gated_calls_pending), finished or expired ones are deleted
    # past their retention, oldest first (gated_calls_created), and a deleted call's approval
    # goes with it, as a deleted conversation's does (a trigger; its answers cascade). Online:
    # indexes built concurrently, a trigger (a brief lock).
    Online((
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS gated_calls_pending ON gated_calls (owner)"
        " WHERE status = 'pending'",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS gated_calls_created"
        " ON gated_calls (created_at)",
        """CREATE OR REPLACE FUNCTION approvals_follow_gated_call() RETURNS trigger
           LANGUAGE plpgsql AS $$
           BEGIN
               DELETE FROM approvals WHERE conversation_id = OLD.call_id;
               RETURN OLD;
           END $$""",
        "DROP TRIGGER IF EXISTS approvals_follow_gated_call ON gated_calls",
        "CREATE TRIGGER approvals_follow_gated_call AFTER DELETE ON gated_calls"
        " FOR EACH ROW EXECUTE FUNCTION approvals_follow_gated_call()",
    )),
    # 17: upstream MCP tools quarantined (agent/gate/upstream_pins.py): a catalog tool whose
    # server no longer serves the definition its pin names (changed or gone), keyed by
    # server, tool and the pin it fails; what was served instead (its digest and pinned
    # fields, NULL when the tool is gone), first and last seen. Every replica's call path
    # reads it by primary key right before a call is sent, so one replica's finding stops
    # the tool on all of them. A row is deleted when the definition matches its pin again; a
    # catalog with a new pin names another key. A new table nobody writes yet: one short
    # transaction.
    """
    CREATE TABLE IF NOT EXISTS upstream_quarantine (
        server           text NOT NULL,           -- the catalog's upstream name
        tool             text NOT NULL,           -- the tool's name on that server
        pin              text NOT NULL,           -- the catalog's pin it no longer matches
        observed         text,                    -- the served definition's pin; NULL: gone
        definition       jsonb,                   -- the served definition's pinned fields
        first_seen       timestamptz NOT NULL DEFAULT now(),
        last_seen        timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (server, tool, pin)
    );
    """,
]
