-- docstream SQLite schema, version 001: the same tables and keys as Cassandra (docs/storage.md).
-- Embeddings are little-endian float32 BLOBs; timestamps are ISO-8601 UTC text (milliseconds).

CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT NOT NULL PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at TEXT NOT NULL,
    status TEXT NOT NULL,
    document_count INTEGER NOT NULL,
    options TEXT NOT NULL,
    webhook_url TEXT,
    completed INTEGER NOT NULL,
    partial INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    updated_at TEXT
);

CREATE INDEX IF NOT EXISTS jobs_by_tenant ON jobs (tenant, job_id);

CREATE TABLE IF NOT EXISTS job_documents (
    job_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    status TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    filename TEXT,
    error_code TEXT,
    PRIMARY KEY (job_id, doc_id)
);

CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT NOT NULL PRIMARY KEY,
    job_id TEXT NOT NULL,
    source_uri TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    status TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    media_type TEXT,
    filename TEXT,
    page_count INTEGER,
    error_code TEXT,
    error TEXT
);

CREATE TABLE IF NOT EXISTS document_results (
    doc_id TEXT NOT NULL,
    model_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    status TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    failed_chunks INTEGER NOT NULL,
    token_count INTEGER NOT NULL,
    embedding BLOB NOT NULL,
    chunker_settings TEXT NOT NULL,
    completed_at TEXT NOT NULL,
    content_sha256 TEXT,
    PRIMARY KEY (doc_id, model_id)
);

CREATE TABLE IF NOT EXISTS chunks (
    doc_id TEXT NOT NULL,
    model_id TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    chunk_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    text TEXT NOT NULL,
    page_start INTEGER NOT NULL,
    page_end INTEGER NOT NULL,
    char_start INTEGER NOT NULL,
    char_end INTEGER NOT NULL,
    token_count INTEGER NOT NULL,
    embedding BLOB NOT NULL,
    heading TEXT,
    status TEXT NOT NULL,
    error_code TEXT,
    PRIMARY KEY (doc_id, model_id, chunk_index)
);

-- search scans one model's rows (optionally one job's) in rowid order, page by page
CREATE INDEX IF NOT EXISTS chunks_by_model ON chunks (model_id);
CREATE INDEX IF NOT EXISTS chunks_by_model_job ON chunks (model_id, job_id);
