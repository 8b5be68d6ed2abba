-- docstream SQLite schema, version 006: where text came from (docs/chunking.md "Provenance").
-- chunks: text_source (text_layer | ocr), the OCR engine, the verdicts of the chunk's pages (comma-separated,
-- page_start to page_end); documents: pages counted by verdict and by text source (JSON maps).
-- NULL in rows written before: read back as text_layer, no engine, no verdicts, no counts.

ALTER TABLE chunks ADD COLUMN text_source TEXT;
ALTER TABLE chunks ADD COLUMN ocr_engine TEXT;
ALTER TABLE chunks ADD COLUMN page_verdicts TEXT;
ALTER TABLE documents ADD COLUMN pages_by_verdict TEXT;
ALTER TABLE documents ADD COLUMN pages_by_source TEXT;
