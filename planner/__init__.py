"""planner (placeholder package: see its README)."""
