"""Delta's own terms: commit files, checkpoints, file changes, table retention, control tables, outside changes."""
