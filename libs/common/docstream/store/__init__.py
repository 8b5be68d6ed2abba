"""docstream.store."""
