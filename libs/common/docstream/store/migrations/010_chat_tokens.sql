-- docstream SQLite schema, version 010: the prompt and completion tokens a chat model's server counted (the
-- generate task), a job's and each of its documents' (docs/operations.md "What a job cost"), as a JSON map.
-- NULL in rows written before: no chat tokens.

ALTER TABLE jobs ADD COLUMN chat_tokens TEXT;
ALTER TABLE job_documents ADD COLUMN chat_tokens TEXT;
