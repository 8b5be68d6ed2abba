"""docstream inference service."""
