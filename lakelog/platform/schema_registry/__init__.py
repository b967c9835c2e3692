"""A schema registry compatible with Confluent's API: the model and its control table (no HTTP here)."""

from lakelog.platform.schema_registry.registry import SchemaRegistry, schema_fields

__all__ = ["SchemaRegistry", "schema_fields"]
