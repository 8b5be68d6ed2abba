-- docstream SQLite schema, version 014: versions ordered by submission and deletes that are final
-- (docs/reliability.md "Invariants"): a source's generation, assigned by compare-and-set, and the generation
-- up to which it is deleted; on each documents row, its generation and when it was deleted.

ALTER TABLE sources ADD COLUMN generation INTEGER;
ALTER TABLE sources ADD COLUMN deleted_through INTEGER;
ALTER TABLE documents ADD COLUMN generation INTEGER;
ALTER TABLE documents ADD COLUMN deleted_at TEXT;
