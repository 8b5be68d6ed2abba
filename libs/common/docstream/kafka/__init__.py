"""docstream.kafka."""
