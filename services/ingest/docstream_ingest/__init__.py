"""docstream ingest service."""
