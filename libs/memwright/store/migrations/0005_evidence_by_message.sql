-- The evidence links of one user's message, for the message status (store/status.py) and for
-- erasure: the primary key (memory_id, message_id) cannot answer "which memories cite message m
-- of user u", so without this every such question read the whole table, which only grows.
CREATE INDEX IF NOT EXISTS memory_evidence_user_message ON memory_evidence (user_id, message_id);
