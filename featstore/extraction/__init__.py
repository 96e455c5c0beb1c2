"""Extraction: models, their heads, image data, a network over a spec -> a store."""
