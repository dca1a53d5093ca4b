"""The differential dataflow runtime (see README.md in this folder)."""
