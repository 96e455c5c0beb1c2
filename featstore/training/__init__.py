"""Training loops whose checkpoints featstore extracts (the `ce` trainer and, later, the
training-time OOD methods)."""
