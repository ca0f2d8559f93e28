"""hango-memory."""
