-- docstream SQLite schema, version 009: table chunks (docs/chunking.md "Tables").
-- chunks: what the chunk holds (kind: text or table) and, for a table chunk, its part of the table: the JSON
-- text of the ChunkTable record (page, bbox, caption, header, rows, columns, row range, cells with spans).
-- NULL in rows written before: read back as kind text, no table.

ALTER TABLE chunks ADD COLUMN kind TEXT;
ALTER TABLE chunks ADD COLUMN table_part TEXT;
