"""/docs and /redoc load Swagger UI and ReDoc from this server (assets installed with the package), never a CDN,
and stay behind a key with `docs_require_key`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from tests.http.conftest import ThreadServer, make_settings

SOURCES = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


def referenced(page: str) -> list[str]:
    return SOURCES.findall(page)


def test_docs_pages_reference_only_local_assets(tmp_path: Path) -> None:
    server = ThreadServer(make_settings(tmp_path / "root")).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for page, kinds in (("/docs", {"javascript", "css"}), ("/redoc", {"javascript"})):
                answer = client.get(page)
                assert answer.status_code == 200
                assert "http://" not in answer.text and "https://" not in answer.text, answer.text
                urls = referenced(answer.text)
                seen = set()
                for url in urls:
                    asset = client.get(url)
                    assert asset.status_code == 200, url
                    seen |= {kind for kind in ("javascript", "css") if kind in asset.headers["content-type"]}
                assert kinds <= seen, (page, urls)
    finally:
        server.stop()


def test_guarded_docs_pages_need_a_key_and_their_assets_do_not(tmp_path: Path) -> None:
    server = ThreadServer(make_settings(tmp_path / "root", api_keys_json=json.dumps({"k": "alice"}),
                                       docs_require_key=True)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
                assert client.get(path).status_code == 401, path
                assert client.get(path, headers={"Authorization": "Bearer k"}).status_code == 200, path
            assert client.get("/docs-assets/swagger-ui-bundle.js").status_code == 200
    finally:
        server.stop()
