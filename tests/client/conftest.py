"""The client tests run against the HTTP tests' real servers (uvicorn on 127.0.0.1 in a thread)."""

from tests.http.conftest import start_server  # noqa: F401  (a fixture)
