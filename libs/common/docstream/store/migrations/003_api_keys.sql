-- docstream SQLite schema, version 003: API keys of the HTTP intake API (docs/api.md).
-- Only a hash of each key is kept (docstream.apikeys); key_id is the public part of the key.

CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT NOT NULL PRIMARY KEY,
    tenant TEXT NOT NULL,
    key_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    name TEXT,
    revoked_at TEXT
);
