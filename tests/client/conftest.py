"""The client tests' fixtures; they live in client_server.py, whose name (unlike conftest) is unique on sys.path."""

from client_server import shared_server, start_server  # noqa: F401  (fixtures)
