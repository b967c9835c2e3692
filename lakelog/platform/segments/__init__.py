"""Segments: data files, their index from Delta statistics, file slices and the content index."""
