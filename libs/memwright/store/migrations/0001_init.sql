-- memwright schema, version 1. PostgreSQL is the source of truth (invariant 9).

-- The evidence store: every user message the sweeper saw, idempotent on (user_id, message_id).
CREATE TABLE messages (
    user_id          text        NOT NULL,
    message_id       text        NOT NULL,
    seq              bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,  -- per-user order for the watermark
    conversation_id  text        NOT NULL,
    project_id       text,
    role             text        NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'assistant')),
    text             text        NOT NULL,
    sent_at          timestamptz,
    accepted_at      timestamptz NOT NULL,
    swept_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, message_id)
);
CREATE INDEX messages_user_seq ON messages (user_id, seq);

-- Per-user backlog: a row exists while signals wait for the user's memory agent (invariant 4).
CREATE TABLE backlog (
    user_id        text        PRIMARY KEY,
    waiting_since  timestamptz NOT NULL,  -- acceptance time of the oldest signal not yet curated
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX backlog_waiting ON backlog (waiting_since);

-- One memory agent per user: its lease (invariants 2 and 3) and its signal watermark.
CREATE TABLE agents (
    user_id           text        PRIMARY KEY,
    lease_owner       text,
    lease_epoch       bigint      NOT NULL DEFAULT 0,  -- fencing token, +1 on every claim
    lease_expires_at  timestamptz,
    watermark         bigint      NOT NULL DEFAULT 0,  -- highest messages.seq curated for this user
    memory_budget     integer     NOT NULL DEFAULT 40 CHECK (memory_budget > 0),
    created_at        timestamptz NOT NULL DEFAULT now()
);

-- The agent's working memory: running summary, hypotheses, recent transcript (invariant 8).
CREATE TABLE agent_state (
    user_id     text        PRIMARY KEY REFERENCES agents (user_id) ON DELETE CASCADE,
    summary     text        NOT NULL DEFAULT '',
    hypotheses  jsonb       NOT NULL DEFAULT '[]'::jsonb,
    transcript  jsonb       NOT NULL DEFAULT '[]'::jsonb,
    version     bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memories (
    memory_id   uuid        PRIMARY KEY,
    user_id     text        NOT NULL,
    author      text        NOT NULL CHECK (author IN ('user', 'agent')),
    kind        text        NOT NULL DEFAULT 'preference',
    text        text        NOT NULL CHECK (length(text) BETWEEN 1 AND 2000),
    version     integer     NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memories_user ON memories (user_id, created_at, memory_id);

-- Receipts (invariant 6): permanent links from a memory to the messages that justify it.
-- No foreign key to memories: links outlive a deleted or consolidated memory.
CREATE TABLE memory_evidence (
    memory_id   uuid        NOT NULL,
    user_id     text        NOT NULL,
    message_id  text        NOT NULL,
    run_id      uuid,
    linked_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (memory_id, message_id),
    FOREIGN KEY (user_id, message_id) REFERENCES messages (user_id, message_id)
);

-- Append-only audit trail of every change (invariant 6).
CREATE TABLE memory_audit (
    audit_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    memory_id   uuid        NOT NULL,
    user_id     text        NOT NULL,
    action      text        NOT NULL CHECK (action IN ('create', 'update', 'consolidate', 'delete')),
    actor       text        NOT NULL CHECK (actor IN ('agent', 'user', 'system')),
    run_id      uuid,
    before      jsonb,
    after       jsonb,
    evidence    text[]      NOT NULL DEFAULT '{}',
    reason      text        NOT NULL DEFAULT '',
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_audit_memory ON memory_audit (memory_id, audit_id);

-- Transactional outbox: written with the memory change, relayed to memory.changelog (invariant 9).
CREATE TABLE index_outbox (
    outbox_id   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    memory_id   uuid        NOT NULL,
    user_id     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Every agent run, whatever its outcome (invariant 3).
CREATE TABLE curation_runs (
    run_id          uuid        PRIMARY KEY,
    user_id         text        NOT NULL,
    worker          text        NOT NULL,
    lease_epoch     bigint      NOT NULL,
    status          text        NOT NULL CHECK (status IN ('running', 'committed', 'failed', 'abandoned', 'fenced')),
    policy          text        NOT NULL,
    watermark_from  bigint      NOT NULL,
    watermark_to    bigint,
    messages_seen   integer     NOT NULL DEFAULT 0,
    changes         integer     NOT NULL DEFAULT 0,
    error           text,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX curation_runs_user ON curation_runs (user_id, started_at);

-- Invariant 6: the audit trail is append-only.
CREATE FUNCTION memwright_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'memory_audit is append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER memory_audit_append_only BEFORE UPDATE OR DELETE ON memory_audit
    FOR EACH ROW EXECUTE FUNCTION memwright_audit_append_only();

-- Invariant 7: user-written memories change only in a transaction that acts for the user
-- (SET LOCAL memwright.actor = 'user'); the agent's transactions never do.
CREATE FUNCTION memwright_protect_user_memories() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.author = 'user' AND coalesce(current_setting('memwright.actor', true), '') <> 'user' THEN
        RAISE EXCEPTION 'memory % was written by the user; only the user can change it', OLD.memory_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.author <> OLD.author THEN
        RAISE EXCEPTION 'the author of a memory cannot change' USING ERRCODE = 'check_violation';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END $$;
CREATE TRIGGER memories_protect_user BEFORE UPDATE OR DELETE ON memories
    FOR EACH ROW EXECUTE FUNCTION memwright_protect_user_memories();

-- Invariant 5: agent-written memories never exceed the user's budget, whatever the code path.
CREATE FUNCTION memwright_enforce_budget() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    used integer;
BEGIN
    IF NEW.author <> 'agent' THEN
        RETURN NEW;
    END IF;
    INSERT INTO agents (user_id) VALUES (NEW.user_id) ON CONFLICT (user_id) DO NOTHING;
    -- the agents row lock serialises concurrent inserts for one user
    SELECT memory_budget INTO cap FROM agents WHERE user_id = NEW.user_id FOR UPDATE;
    SELECT count(*) INTO used FROM memories WHERE user_id = NEW.user_id AND author = 'agent';
    IF used >= cap THEN
        RAISE EXCEPTION 'memory budget of % agent-written memories is full for this user', cap
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER memories_budget BEFORE INSERT ON memories
    FOR EACH ROW EXECUTE FUNCTION memwright_enforce_budget();
