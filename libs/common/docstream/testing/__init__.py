"""docstream.testing."""
