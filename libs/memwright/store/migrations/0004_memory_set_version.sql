-- memwright schema, version 4: a per-user memory-set version for the start-of-turn read.
--
-- The api caches each user's rendered context block keyed on this version, and answers a
-- conditional GET (If-None-Match) from it alone: one indexed single-row SELECT instead of the
-- full preview SELECT. So every change to a user's memories, through any path (agent commits,
-- user writes, erasure, plain SQL), must move it, and it must never take a value it had before.

-- Values come from one sequence: never reused, even if a row is removed and comes back, so an api
-- process that cached (user, version) can never meet that version again with other content.
CREATE SEQUENCE memory_set_version_seq AS bigint;

CREATE TABLE memory_set_versions (
    user_id     text    PRIMARY KEY,
    version     bigint  NOT NULL,  -- nextval of memory_set_version_seq at the last committed change
    changed_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO memory_set_versions (user_id, version)
SELECT user_id, nextval('memory_set_version_seq') FROM (SELECT DISTINCT user_id FROM memories) AS users;

-- The upsert takes the user's version row lock. It runs at COMMIT (a deferred constraint trigger),
-- after every memory row lock the transaction takes, so it adds no lock-order deadlock between a
-- user's write and an agent commit touching the same memories; and writers of one user take the
-- new value in commit order, so the version a reader sees only grows.
CREATE FUNCTION memwright_bump_memory_set() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    owner text := CASE WHEN TG_OP = 'DELETE' THEN OLD.user_id ELSE NEW.user_id END;
BEGIN
    INSERT INTO memory_set_versions (user_id, version) VALUES (owner, nextval('memory_set_version_seq'))
    ON CONFLICT (user_id) DO UPDATE SET version = nextval('memory_set_version_seq'), changed_at = now();
    IF TG_OP = 'UPDATE' AND OLD.user_id <> NEW.user_id THEN  -- a memory moved between users: both sets changed
        INSERT INTO memory_set_versions (user_id, version) VALUES (OLD.user_id, nextval('memory_set_version_seq'))
        ON CONFLICT (user_id) DO UPDATE SET version = nextval('memory_set_version_seq'), changed_at = now();
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER memories_set_version AFTER INSERT OR UPDATE OR DELETE ON memories
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION memwright_bump_memory_set();

-- TRUNCATE fires no row trigger: every user's set may have changed.
CREATE FUNCTION memwright_bump_all_memory_sets() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_set_versions SET version = nextval('memory_set_version_seq'), changed_at = now();
    RETURN NULL;
END $$;
CREATE TRIGGER memories_truncate_set_version AFTER TRUNCATE ON memories
    FOR EACH STATEMENT EXECUTE FUNCTION memwright_bump_all_memory_sets();
