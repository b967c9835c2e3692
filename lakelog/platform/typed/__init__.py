"""Typed topics: the typed column, typed produce and typed fetch."""
