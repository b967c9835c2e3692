"""The HTTP ingest tier (FastAPI): produce, fetch, consumer groups, admin, access control, metrics.

It translates HTTP into calls on `lakelog.platform`; no log logic lives here.
"""

from lakelog.ingest_api.app import create_app

__all__ = ["create_app"]
