"""Malformed-input fuzzing: a corpus of real statements and the mutations applied to them."""
