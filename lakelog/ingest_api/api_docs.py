"""/docs (Swagger UI) and /redoc (ReDoc) served from assets installed with the package, no CDN.

The assets come from the `fastapi-offline` distribution (its `static/` folder: Swagger UI's bundle and CSS,
ReDoc's standalone bundle, a favicon); only those files are used, not its FastAPI subclass. They hold no
data, so they are served without a key; the pages and /openapi.json stay guarded by `docs_require_key`.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS_PATH = "/docs-assets"
SWAGGER_JS = f"{ASSETS_PATH}/swagger-ui-bundle.js"
SWAGGER_CSS = f"{ASSETS_PATH}/swagger-ui.css"
REDOC_JS = f"{ASSETS_PATH}/redoc.standalone.js"
FAVICON = f"{ASSETS_PATH}/favicon.png"


def assets_dir() -> Path:
    return Path(str(files("fastapi_offline") / "static"))


def install(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc",
            oauth2_redirect_url: str = "/docs/oauth2-redirect") -> None:
    """The app must be built with `docs_url=None, redoc_url=None`; these routes take their place (and their
    paths are set back on the app, so that `_guard_docs` finds them)."""
    openapi_url = app.openapi_url or "/openapi.json"
    app.mount(ASSETS_PATH, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url=oauth2_redirect_url, swagger_js_url=SWAGGER_JS,
                                   swagger_css_url=SWAGGER_CSS, swagger_favicon_url=FAVICON)

    @app.get(oauth2_redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(redoc_url, include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{app.title} - ReDoc", redoc_js_url=REDOC_JS,
                              redoc_favicon_url=FAVICON, with_google_fonts=False)

    app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url = docs_url, redoc_url, oauth2_redirect_url
