"""The web console at /ui: static pages (vendored in the package, no CDN) that read the HTTP API from the
browser with the API key the user enters; the pages hold no data, so serving them needs no key."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

ASSETS = Path(__file__).with_name("console_assets")
PATH = "/ui"


def install(app: FastAPI) -> None:
    """`/ui` redirects to `/ui/`, which serves index.html; the pages call `/v1/...` on the same origin."""
    app.mount(PATH, StaticFiles(directory=ASSETS, html=True), name="console")
