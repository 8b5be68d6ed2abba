-- docstream SQLite schema, version 012: per-tenant admission (docs/operations.md "Quotas and admission"):
-- a tenant's admitted documents not ended yet and their tokens once chunked, the tokens of the documents that
-- ended on a UTC day, and leases (one admission at a time per tenant, across processes on one file).

CREATE TABLE IF NOT EXISTS tenant_inflight (
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    admitted_at TEXT NOT NULL,
    tokens INTEGER,
    PRIMARY KEY (tenant, doc_id)
);

CREATE TABLE IF NOT EXISTS tenant_daily (
    tenant TEXT NOT NULL,
    day TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    PRIMARY KEY (tenant, day, doc_id)
);

CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL
);
