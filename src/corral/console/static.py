"""Serving the built console: ``/console/`` is its page, ``/console/assets/...`` its files.

The files come from ``console/`` in the repository, built by ``scripts/setup`` (Vite) into
``BUILT``; the daemon only reads them. Paths are resolved inside that directory (nothing outside
it is served); hashed assets are cached for good, the page itself is revalidated. Every answer
carries a Content-Security-Policy that allows only the daemon's own scripts and connections, and
forbids framing (clickjacking).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

BUILT = Path(__file__).parent / "static"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>corral console</title>
<h1>The console is not built</h1>
<p>This daemon has no built console files in {where}. Run <code>./scripts/setup</code> in the
corral checkout (it builds them with Node.js), then reload this page.</p>"""


def router(root: Path) -> APIRouter:
    routes = APIRouter(include_in_schema=False)

    @routes.get("/console")
    async def console_root() -> Response:
        return RedirectResponse("/console/", status_code=308)

    @routes.get("/console/{path:path}")
    async def console_file(path: str) -> Response:
        index = root / "index.html"
        if not index.is_file():
            return HTMLResponse(
                NOT_BUILT.format(where=root), status_code=503, headers=SECURITY_HEADERS
            )
        if path.startswith("api/"):
            return Response(status_code=404)
        target = (root / path).resolve()
        inside = target.is_relative_to(root.resolve())
        if path and inside and target.is_file():
            cache = (
                "public, max-age=31536000, immutable" if path.startswith("assets/") else "no-cache"
            )
            return FileResponse(target, headers={**SECURITY_HEADERS, "Cache-Control": cache})
        if path and ("." in path.rsplit("/", 1)[-1] or not inside):
            return Response("no such console file\n", status_code=404, headers=SECURITY_HEADERS)
        # The page itself (its routes live after the '#').
        return FileResponse(index, headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})

    return routes
