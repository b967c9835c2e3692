"""The catalog of topics: its Delta table, topic configuration and topics created on first use."""
