"""grammar (placeholder package: see its README)."""
