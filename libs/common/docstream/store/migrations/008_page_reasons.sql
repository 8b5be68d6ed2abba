-- docstream SQLite schema, version 008: why each page kept its text (docs/chunking.md "Provenance").
-- chunks: the reasons of the chunk's pages (comma-separated, page_start to page_end, beside page_verdicts).
-- NULL in rows written before: read back as no reasons.

ALTER TABLE chunks ADD COLUMN page_reasons TEXT;
