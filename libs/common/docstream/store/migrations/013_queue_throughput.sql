-- docstream SQLite schema, version 013: where jobs stand (docs/operations.md "Where a job stands"): a row per
-- job not ended yet, by lane (deleted when the job ends), and each reducer process's recent rate, which
-- expires at expires_at (epoch seconds; a write deletes the rows expired, a read skips them).

CREATE TABLE IF NOT EXISTS lane_queue (
    lane TEXT NOT NULL,
    job_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    created_at TEXT NOT NULL,
    waiting_tokens INTEGER NOT NULL,
    ended_documents INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (lane, job_id)
);

CREATE TABLE IF NOT EXISTS throughput (
    name TEXT NOT NULL,
    instance TEXT NOT NULL,
    tokens_per_s REAL NOT NULL,
    updated_at TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (name, instance)
);
