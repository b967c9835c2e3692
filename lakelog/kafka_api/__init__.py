"""The Kafka wire protocol: a listener beside HTTP that serves unmodified Kafka clients.

Like the HTTP tier it translates and holds no log logic: requests are decoded with kafka-python's codec
(generated from Kafka's JSON message definitions), record batches go to and from Arrow with aiokafka's
compiled record codec, and every call lands on the same broker core and group coordinator as HTTP.
"""
