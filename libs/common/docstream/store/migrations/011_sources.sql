-- docstream SQLite schema, version 011: the sources table, a document's identity across versions and its
-- current version (docs/intake.md "Versions of a document"); and on each documents row, its source and
-- the version before it.

CREATE TABLE IF NOT EXISTS sources (
    tenant TEXT NOT NULL,
    source_key TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    job_id TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, source_key)
);

ALTER TABLE documents ADD COLUMN source_key TEXT;
ALTER TABLE documents ADD COLUMN previous_doc_id TEXT;
