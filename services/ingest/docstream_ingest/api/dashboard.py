"""The job dashboard at /ui: static HTML, CSS and JS shipped in this package (no build step).

The files are read once, when the app is built, into a fixed map of name → bytes; a request names
one of them or gets 404, so no path under /ui can reach anything else. The page itself holds no
data: it asks for an API key, keeps it in sessionStorage and calls the /v1 JSON API with
``Authorization: Bearer`` like any client, so it sees exactly what the key's tenant may see. Every
/ui response carries a strict Content-Security-Policy (scripts, styles and calls to this origin
only; no inline script or style, no frames, no plugins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from docstream_ingest.api.errors import ApiError

__all__ = ["CONTENT_SECURITY_POLICY", "dashboard_router", "load_assets"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The policy of every /ui response."""

_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\.[a-z0-9]+")
_INDEX = "index.html"


@dataclass(frozen=True, slots=True)
class _Asset:
    body: bytes
    media_type: str


def load_assets() -> dict[str, bytes]:
    """The shipped dashboard files by name (the package's static/ folder, not recursive)."""
    folder = resources.files("docstream_ingest.api").joinpath("static")
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and _NAME.fullmatch(entry.name) and _suffix(entry.name) in _MEDIA_TYPES
    }


def _suffix(name: str) -> str:
    return name[name.rindex("."):]


def _response(asset: _Asset) -> Response:
    return Response(asset.body, media_type=asset.media_type, headers=_HEADERS)


def dashboard_router() -> APIRouter:
    """The /ui routes over the shipped files (read now, once)."""
    assets = {name: _Asset(body, _MEDIA_TYPES[_suffix(name)]) for name, body in load_assets().items()}
    router = APIRouter(prefix="/ui", include_in_schema=False)

    @router.get("")
    @router.get("/")
    def index() -> Response:
        return _response(assets[_INDEX])

    @router.get("/{name}")
    def asset(name: str) -> Response:
        found = assets.get(name)
        if found is None:
            raise ApiError(404, "not_found", "no such file", headers=_HEADERS)
        return _response(found)

    return router
