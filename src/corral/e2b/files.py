"""envd's HTTP routes: ``GET/POST /files`` (download, upload; also as signed URLs) and
``GET /health``, over corral's FileService.

An upload is ``application/octet-stream`` (one file, ``?path=``) or ``multipart/form-data`` (one
or more files, each part's filename its path, or ``?path=`` for a single part), either possibly
``Content-Encoding: gzip``; all stream.
A signed URL (``?signature=``) is checked against the sandbox's access token; one that names no
sandbox (an E2B_SANDBOX_URL without ids) is matched against the running sandboxes' tokens.
"""

from __future__ import annotations

import posixpath
import zlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, Router

from corral.e2b.context import TOKEN_OK_HEADER, sandbox_of
from corral.e2b.errors import files_error_of, gone_message
from corral.e2b.multipart import read_parts
from corral.e2b.tokens import AccessTokens
from corral.service.errors import CorralError, InvalidRequest, Unauthorized
from corral.service.files import FileService
from corral.service.model import SandboxState
from corral.service.sandboxes import SandboxService


def _tokens(request: Request) -> AccessTokens:
    tokens: AccessTokens = request.app.state.e2b_tokens
    return tokens


def _expiration(request: Request) -> int | None:
    raw = request.query_params.get("signature_expiration")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise InvalidRequest("signature_expiration must be a unix time") from exc


def authorised_sandbox(
    request: Request, operation: str, path: str, sandboxes: SandboxService
) -> str:
    """The sandbox this /files request may touch: the dispatcher's (token checked), or the one
    whose token signed the URL."""
    sandbox_id = sandbox_of(request.headers)
    signature = request.query_params.get("signature")
    if request.headers.get(TOKEN_OK_HEADER) == "1" and sandbox_id:
        return sandbox_id
    if not signature:
        raise Unauthorized("send the sandbox's X-Access-Token or use a signed URL")
    user = request.query_params.get("username", "")
    expiration = _expiration(request)
    tokens = _tokens(request)
    candidates = (
        [sandbox_id]
        if sandbox_id
        else [r.id for r in sandboxes.list(states=[SandboxState.RUNNING, SandboxState.PARKED])]
    )
    for candidate in candidates:
        if tokens.check_signature(
            candidate, signature, path=path, operation=operation, user=user, expiration=expiration
        ):
            return candidate
    raise Unauthorized("the URL's signature is wrong or expired")


def _path(request: Request) -> str:
    path = request.query_params.get("path")
    if not path:
        raise InvalidRequest("query parameter 'path' is required")
    return path


GUNZIP_STEP = 1 << 20


async def gunzip(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Decompress a gzip upload as it streams, at most GUNZIP_STEP bytes at a time (so a small
    bomb never becomes a big buffer; the sandbox's disk bounds the total)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        async for chunk in chunks:
            data = inflater.decompress(chunk, GUNZIP_STEP)
            while data:
                yield data
                data = inflater.decompress(inflater.unconsumed_tail, GUNZIP_STEP)
        if not inflater.eof:
            raise InvalidRequest("the gzip upload ended before its end")
        if tail := inflater.flush():
            yield tail
    except zlib.error as exc:
        raise InvalidRequest(f"the upload is not valid gzip: {exc}") from exc


def _written(path: str) -> dict[str, Any]:
    return {"name": posixpath.basename(path), "type": "file", "path": path}


class EnvdHttp:
    """envd's HTTP routes for the sandbox the dispatcher put in the request."""

    def __init__(self, files: FileService, sandboxes: SandboxService) -> None:
        self._files = files
        self._sandboxes = sandboxes

    def router(self) -> Router:
        return Router(
            routes=[
                Route("/files", self.download, methods=["GET"]),
                Route("/files", self.upload, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
            ]
        )

    async def download(self, request: Request) -> Response:
        sandbox_id = sandbox_of(request.headers)
        try:
            path = _path(request)
            sandbox_id = authorised_sandbox(request, "read", path, self._sandboxes)
            chunks = await self._files.read(sandbox_id, path)
        except CorralError as exc:
            return files_error_of(sandbox_id, exc)
        return StreamingResponse(chunks, media_type="application/octet-stream")

    async def upload(self, request: Request) -> Response:
        sandbox_id = sandbox_of(request.headers)
        files = self._files
        content_type = request.headers.get("content-type", "")
        try:
            encoding = request.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("identity", "gzip"):
                raise InvalidRequest(f"uploads may be gzip or uncompressed, not {encoding!r}")
            body = gunzip(request.stream()) if encoding == "gzip" else request.stream()
            query_path = request.query_params.get("path")
            if content_type.startswith("multipart/form-data"):
                sandbox_id = authorised_sandbox(request, "write", query_path or "", self._sandboxes)

                async def sink(filename: str, data: AsyncIterator[bytes]) -> dict[str, Any]:
                    path = query_path or filename
                    if not path:
                        raise InvalidRequest(
                            "a multipart part has no filename and no ?path= is given"
                        )
                    result = await files.write(sandbox_id, path, data, None, True)
                    return _written(result.get("path", path))

                written = await read_parts(content_type, body, sink)
            else:
                path = _path(request)
                sandbox_id = authorised_sandbox(request, "write", path, self._sandboxes)
                result = await files.write(sandbox_id, path, body, None, True)
                written = [_written(result.get("path", path))]
        except CorralError as exc:
            return files_error_of(sandbox_id, exc)
        return JSONResponse(written)

    async def health(self, request: Request) -> Response:
        sandbox_id = sandbox_of(request.headers)
        try:
            record = self._sandboxes.get(sandbox_id)
        except CorralError as exc:
            return files_error_of(sandbox_id, exc)
        if record.state != SandboxState.RUNNING:
            message = gone_message(sandbox_id, f"it is {record.state}")
            return JSONResponse({"code": 502, "message": message}, status_code=502)
        return Response(status_code=204)
