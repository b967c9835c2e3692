"""Structured, quiet-by-default logging: one JSON object per line on stderr."""

from __future__ import annotations

import json
import logging
import sys
import time

# Start-up facts (listening URLs, root, catalog created, store ready): shown even at the default WARNING level.
startup_log = logging.getLogger("lakelog.startup")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in getattr(record, "fields", {}).items():
            entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "WARNING") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    startup_log.setLevel(logging.INFO if root.level <= logging.WARNING else root.level)
    for noisy in ("werkzeug", "botocore", "s3fs", "aiobotocore", "py4j"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
