"""Produce calls on their way in: admission, record checks, producer state, group commit."""
