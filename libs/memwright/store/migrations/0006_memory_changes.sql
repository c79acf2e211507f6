-- memwright schema, version 6: the public stream of memory changes (memory.changes) comes from
-- the same outbox as the index. Each outbox row names the audit row of the change it announces,
-- written in the same transaction; the relay publishes that row as a CloudEvent keyed by the user.
-- NULL: the row is for the index only (erasure's vector deletes of memories no longer there, and
-- rows written before this migration).
ALTER TABLE index_outbox ADD COLUMN audit_id bigint;
