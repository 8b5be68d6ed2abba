-- docstream SQLite schema, version 005: what a job and each of its documents cost (docs/operations.md).
-- pages, chunks, tokens; model microseconds per device and busy microseconds per stage as JSON maps.
-- NULL in rows written before: read back as no usage.

ALTER TABLE jobs ADD COLUMN pages INTEGER;
ALTER TABLE jobs ADD COLUMN chunks INTEGER;
ALTER TABLE jobs ADD COLUMN tokens INTEGER;
ALTER TABLE jobs ADD COLUMN model_us TEXT;
ALTER TABLE jobs ADD COLUMN stage_us TEXT;
ALTER TABLE job_documents ADD COLUMN pages INTEGER;
ALTER TABLE job_documents ADD COLUMN chunks INTEGER;
ALTER TABLE job_documents ADD COLUMN tokens INTEGER;
ALTER TABLE job_documents ADD COLUMN model_us TEXT;
ALTER TABLE job_documents ADD COLUMN stage_us TEXT;
