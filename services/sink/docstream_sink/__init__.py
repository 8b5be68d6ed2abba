"""docstream sink service: completed documents → an external vector store (docs/sinks.md)."""
