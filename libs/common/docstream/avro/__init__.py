"""docstream.avro."""
