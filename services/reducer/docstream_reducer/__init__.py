"""docstream reducer service."""
