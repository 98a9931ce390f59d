"""Our own tables, as an append-only list of migrations (the index is the version).

Never edit or reorder an applied entry: add a new one. A retired entry becomes "SELECT 1;".
LangGraph's checkpoint tables are not ours; `AsyncPostgresSaver.setup()` owns them.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
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
    # 4: owner-scoped search. Every search is one user's, so each message's lexemes are stored
    # prefixed with a hash of its conversation's owner ("3f2a…/энерг"), and one GIN lookup
    # finds only that user's matches: a word common elsewhere but absent from the user's
    # messages is an empty posting list instead of a check of every conversation they have
    # (agent/README_rest.md has the numbers). A BEFORE trigger fills it, so every writer
    # (the turn store, the REST append, COPY) stays as it is. The hash is only an index key:
    # the query still filters conversations by owner. messages.tsv (migration 1) goes.
    r"""
    CREATE OR REPLACE FUNCTION owner_lexeme_prefix(owner text) RETURNS text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT left(md5(owner), 16) || '/' $$;
    -- Lexemes are single-quoted in the text form of tsvector and tsquery ('' inside).
    CREATE OR REPLACE FUNCTION owner_tsvector(owner text, content text) RETURNS tsvector
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT regexp_replace(to_tsvector('russian'::regconfig, content)::text,
                                    $re$'((?:[^']|'')*)'$re$,
                                    '''' || owner_lexeme_prefix(owner) || '\1''', 'g')::tsvector $$;
    CREATE OR REPLACE FUNCTION owner_tsquery(owner text, q text) RETURNS tsquery
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT regexp_replace(websearch_to_tsquery('russian'::regconfig, q)::text,
                                    $re$'((?:[^']|'')*)'$re$,
                                    '''' || owner_lexeme_prefix(owner) || '\1''', 'g')::tsquery $$;

    ALTER TABLE messages ADD COLUMN IF NOT EXISTS search tsvector;
    CREATE OR REPLACE FUNCTION messages_search() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.search := owner_tsvector(
            (SELECT owner FROM conversations WHERE id = NEW.conversation_id), NEW.content);
        RETURN NEW;
    END $$;
    DROP TRIGGER IF EXISTS messages_search ON messages;
    CREATE TRIGGER messages_search BEFORE INSERT OR UPDATE OF content, conversation_id
        ON messages FOR EACH ROW EXECUTE FUNCTION messages_search();
    UPDATE messages m SET search = owner_tsvector(c.owner, m.content)
      FROM conversations c WHERE c.id = m.conversation_id AND m.search IS NULL;
    CREATE INDEX IF NOT EXISTS messages_search ON messages USING gin (search);
    DROP INDEX IF EXISTS messages_tsv;
    ALTER TABLE messages DROP COLUMN IF EXISTS tsv;
    """,
]
