"""The cluster tests start real servers as the HTTP tests do (uvicorn on 127.0.0.1, threads or processes)."""

from tests.http.conftest import start_server  # noqa: F401  (a fixture)
