"""docstream chunker service."""
