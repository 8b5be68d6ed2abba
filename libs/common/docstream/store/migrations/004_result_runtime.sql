-- docstream SQLite schema, version 004: document_results records the model runtime (docs/inference.md).
-- "<backend>/<device>/<precision>[/<threads>t]", e.g. torch/cpu/fp32/2t; NULL in rows written before.

ALTER TABLE document_results ADD COLUMN runtime TEXT;
