"""hango-retry."""
