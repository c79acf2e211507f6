-- Invariant 5, configurable: a user's budget is agents.memory_budget when set (a per-user
-- override), else the curator's MEMWRIGHT_MEMORY_BUDGET, which the agent's commit passes to
-- this trigger as the transaction setting memwright.memory_budget; 40 if neither is there.
ALTER TABLE agents ALTER COLUMN memory_budget DROP NOT NULL;
ALTER TABLE agents ALTER COLUMN memory_budget DROP DEFAULT;
UPDATE agents SET memory_budget = NULL WHERE memory_budget = 40;  -- 40 was the built-in default

CREATE OR REPLACE FUNCTION memwright_enforce_budget() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    used integer;
BEGIN
    IF NEW.author <> 'agent' THEN
        RETURN NEW;
    END IF;
    INSERT INTO agents (user_id) VALUES (NEW.user_id) ON CONFLICT (user_id) DO NOTHING;
    -- the agents row lock serialises concurrent inserts for one user
    SELECT coalesce(memory_budget, nullif(current_setting('memwright.memory_budget', true), '')::integer, 40)
        INTO cap FROM agents WHERE user_id = NEW.user_id FOR UPDATE;
    SELECT count(*) INTO used FROM memories WHERE user_id = NEW.user_id AND author = 'agent';
    IF used >= cap THEN
        RAISE EXCEPTION 'memory budget of % agent-written memories is full for this user', cap
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
