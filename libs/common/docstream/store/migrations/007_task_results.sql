-- docstream SQLite schema, version 007: results of tasks beyond embed (docs/storage.md "Task results").
-- The task's fields as JSON text: label_scores a map, top_chunks a list, mentions a list of
-- [text, label, start, end, page, score], entities a list of [label, text, count, [pages]] (the fields of
-- Cassandra's UDTs, in their order); mentions_truncated 0/1. job_documents.tasks: a JSON map of task name
-- to its TaskTally JSON, each entry set on its own by json_set in one UPSERT (docs/storage.md).
-- NULL in rows written before: read back as task embed, empty maps and lists, no label, not truncated.

ALTER TABLE chunks ADD COLUMN task TEXT;
ALTER TABLE chunks ADD COLUMN label_scores TEXT;
ALTER TABLE chunks ADD COLUMN mentions TEXT;
ALTER TABLE chunks ADD COLUMN output TEXT;
ALTER TABLE document_results ADD COLUMN task TEXT;
ALTER TABLE document_results ADD COLUMN label_scores TEXT;
ALTER TABLE document_results ADD COLUMN top_label TEXT;
ALTER TABLE document_results ADD COLUMN top_chunks TEXT;
ALTER TABLE document_results ADD COLUMN mentions TEXT;
ALTER TABLE document_results ADD COLUMN entities TEXT;
ALTER TABLE document_results ADD COLUMN mentions_truncated INTEGER;
ALTER TABLE document_results ADD COLUMN output TEXT;
ALTER TABLE job_documents ADD COLUMN tasks TEXT;
