"""The node: the broker, its produce face, log ends, open topics, fetch and the read-only reader."""
