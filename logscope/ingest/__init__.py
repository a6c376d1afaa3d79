"""Ingest: find sources (trees, consoles, archives), read bytes in blocks, normalise lines."""
