-- docstream SQLite schema, version 015: the running heads, page numbers and footers that left a chunk's text
-- (ChunkCreated.page_furniture, docs/chunking.md "Page furniture"): a JSON list of texts, null (read as none)
-- in rows written before.

ALTER TABLE chunks ADD COLUMN page_furniture TEXT;
