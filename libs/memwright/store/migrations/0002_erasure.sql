-- memwright schema, version 2: user-written memories and erasure (issue 6).

-- Who asked for a change, as the bearer token said (a user id or service:<name>); NULL for agent runs.
ALTER TABLE memory_audit ADD COLUMN principal text;
-- Set when an erasure removed this row's content; the row stays as a content-free tombstone.
ALTER TABLE memory_audit ADD COLUMN erased_at timestamptz;
ALTER TABLE memory_audit DROP CONSTRAINT memory_audit_action_check;
ALTER TABLE memory_audit ADD CONSTRAINT memory_audit_action_check
    CHECK (action IN ('create', 'update', 'consolidate', 'delete', 'erase'));
CREATE INDEX memory_audit_user ON memory_audit (user_id, audit_id);

-- One row per erasure of a user's data: when, who asked, how much went (counts, no content).
CREATE TABLE user_erasures (
    erasure_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       text        NOT NULL,
    requested_by  text        NOT NULL,
    counts        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    erased_at     timestamptz NOT NULL DEFAULT now(),
    xact          xid8        NOT NULL DEFAULT pg_current_xact_id()  -- the transaction that erased
);
CREATE INDEX user_erasures_user ON user_erasures (user_id, erased_at);

-- The erasure record is as append-only as the audit trail.
CREATE FUNCTION memwright_erasures_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'user_erasures is append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER user_erasures_append_only BEFORE UPDATE OR DELETE ON user_erasures
    FOR EACH ROW EXECUTE FUNCTION memwright_erasures_append_only();

-- Invariant 6, amended for erasure: memory_audit stays append-only (no DELETE, ever). The one
-- UPDATE allowed turns a row into a tombstone: content (before, after, evidence, reason) removed,
-- erased_at set, every other column unchanged, and only inside the transaction that recorded
-- this user's erasure in user_erasures. Nothing else can be scrubbed, rewritten or removed.
CREATE OR REPLACE FUNCTION memwright_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND OLD.erased_at IS NULL AND NEW.erased_at IS NOT NULL
       AND NEW.before IS NULL AND NEW.after IS NULL AND NEW.evidence = '{}' AND NEW.reason = ''
       AND (NEW.audit_id, NEW.memory_id, NEW.user_id, NEW.action, NEW.actor, NEW.run_id, NEW.principal, NEW.at)
           IS NOT DISTINCT FROM
           (OLD.audit_id, OLD.memory_id, OLD.user_id, OLD.action, OLD.actor, OLD.run_id, OLD.principal, OLD.at)
       AND EXISTS (SELECT 1 FROM user_erasures e
                   WHERE e.user_id = OLD.user_id AND e.xact = pg_current_xact_id())
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'memory_audit is append-only (only an erasure of the user may turn rows into tombstones)'
        USING ERRCODE = 'insufficient_privilege';
END $$;

-- A later signal starts fresh: messages accepted before the user's latest erasure (still in a
-- sweep window, or replayed from Kafka) are dropped on insert instead of coming back.
CREATE FUNCTION memwright_drop_erased_messages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM user_erasures e
               WHERE e.user_id = NEW.user_id AND e.erased_at >= NEW.accepted_at) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER messages_drop_erased BEFORE INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION memwright_drop_erased_messages();
