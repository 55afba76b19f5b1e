"""Inbound ports end to end: HTTP and WebSocket servers in a real sandbox, reached through the
daemon's listener by path and by host name, with tokens, public ports, streaming both ways,
auto-wake, bounded heads and clear errors. Traffic stays on loopback and the daemon's slots."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.sync.client import connect as ws_connect

from corral import Client, Sandbox
from tests.e2e.conftest import Daemon
from tests.e2e.workloads import wait_until

HTTP_PORT = 8080
WS_PORT = 8765

SERVER = r"""
import hashlib, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, body, status=200):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/download/"):
            size = int(self.path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = bytes(range(256)) * 4096
            while size:
                part = block[: min(size, len(block))]
                self.wfile.write(part)
                size -= len(part)
            return
        seen = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
        self._answer(json.dumps(seen).encode())

    def do_POST(self):
        digest, size = hashlib.sha256(), 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                length = int(self.rfile.readline().split(b";")[0], 16)
                if not length:
                    self.rfile.readline()
                    break
                data = self.rfile.read(length)
                self.rfile.readline()
                digest.update(data)
                size += len(data)
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                data = self.rfile.read(min(left, 1 << 20))
                digest.update(data)
                size += len(data)
                left -= len(data)
        self._answer(json.dumps({"size": size, "sha256": digest.hexdigest()}).encode())

ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
"""

WS_SERVER = r"""
import asyncio, sys
sys.path.insert(0, "/tmp/wslib")
from websockets.asyncio.server import serve

async def echo(ws):
    async for message in ws:
        await ws.send(message)

async def main():
    async with serve(echo, "0.0.0.0", int(sys.argv[1]), max_size=None):
        await asyncio.Future()

asyncio.run(main())
"""


def _start_servers(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/server.py", SERVER.encode())
    sbx.files.write("/tmp/ws_server.py", WS_SERVER.encode())
    package = Path(websockets.__file__).parent
    for source in package.rglob("*.py"):
        sbx.files.write(f"/tmp/wslib/websockets/{source.relative_to(package)}", source.read_bytes())
    sbx.exec_background(f"python3 /tmp/server.py {HTTP_PORT}")
    sbx.exec_background(f"python3 /tmp/ws_server.py {WS_PORT}")
    listening = "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {}), 1)'"
    wait_until(lambda: sbx.exec(listening.format(HTTP_PORT)).exit_code == 0, 60)
    wait_until(lambda: sbx.exec(listening.format(WS_PORT)).exit_code == 0, 60)


@pytest.fixture(scope="module")
def served(daemon: Daemon) -> Iterator[tuple[Client, Sandbox]]:
    """One sandbox (auto-wake) with an HTTP server and a WebSocket echo server, for the module."""
    with Client(daemon.url, daemon.key) as client:
        sbx = client.create_sandbox(auto_wake=True)
        try:
            _start_servers(sbx)
            yield client, sbx
        finally:
            sbx.kill()


def _host_of(daemon: Daemon) -> tuple[str, int]:
    host, _, port = daemon.url.removeprefix("http://").rpartition(":")
    return host, int(port)


def test_http_by_path_and_host_name_with_the_token(
    daemon: Daemon, served: tuple[Client, Sandbox]
) -> None:
    _, sbx = served
    opened = sbx.ports.open(HTTP_PORT)
    assert opened.token and not opened.public
    assert opened.path_url == f"{daemon.url}/sandboxes/{sbx.id}/ports/{HTTP_PORT}/"
    assert opened.host_url == f"http://{HTTP_PORT}-{sbx.id}.localhost:{_host_of(daemon)[1]}/"
    with httpx.Client(headers={"X-Corral-Token": opened.token}, timeout=30) as http:
        # Two requests on one kept-alive connection, each rewritten to the port's own path.
        for query in ("a=1", "b=2"):
            answer = http.get(f"{opened.path_url}echo?{query}")
            assert answer.status_code == 200, answer.text
            seen = answer.json()
            assert seen["path"] == f"/echo?{query}"
            assert seen["headers"]["x-forwarded-prefix"] == f"/sandboxes/{sbx.id}/ports/{HTTP_PORT}"
            assert "x-corral-token" not in seen["headers"]
        # By host name: the daemon's address, with the port's host name.
        answer = http.get(
            f"{daemon.url}/by-host?x=1",
            headers={"Host": f"{HTTP_PORT}-{sbx.id}.localhost"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["path"] == "/by-host?x=1"
    # The port is listed, and the API on the same listener still answers.
    assert [p.port for p in sbx.ports.list()] == [HTTP_PORT]
    assert httpx.get(f"{daemon.url}/healthz").status_code == 200


def test_tokens_missing_wrong_query_and_cookie(
    daemon: Daemon, served: tuple[Client, Sandbox]
) -> None:
    _, sbx = served
    opened = sbx.ports.open(HTTP_PORT)
    assert opened.token is not None
    missing = httpx.get(opened.path_url + "x")
    assert missing.status_code == 401
    assert "needs its access token" in missing.json()["message"]
    wrong = httpx.get(opened.path_url + "x", headers={"X-Corral-Token": "0" * 64})
    assert wrong.status_code == 403
    assert wrong.json()["code"] == "forbidden"
    # A browser-style link: the token in the query becomes a cookie and leaves the URL.
    with httpx.Client(timeout=30) as browser:
        first = browser.get(f"{opened.path_url}page?corral_token={opened.token}&q=1")
        assert first.status_code == 302
        assert first.headers["location"] == f"/sandboxes/{sbx.id}/ports/{HTTP_PORT}/page?q=1"
        assert "HttpOnly" in first.headers["set-cookie"]
        followed = browser.get(daemon.url + first.headers["location"])
        assert followed.status_code == 200, followed.text
        seen = followed.json()
        assert seen["path"] == "/page?q=1"
        assert "corral_token" not in seen["headers"].get("cookie", "")
    # Another port's token does not open this one.
    other = sbx.ports.open(9)
    assert other.token != opened.token
    crossed = httpx.get(opened.path_url, headers={"X-Corral-Token": other.token or ""})
    assert crossed.status_code == 403
    sbx.ports.close(9)


def test_a_sandbox_server_never_sees_the_console_session_cookie(
    daemon: Daemon, served: tuple[Client, Sandbox]
) -> None:
    """The attack: a user logged in to the web console opens a sandbox's port by its path URL
    (same origin as the console, so the browser sends the session cookie along); the sandbox's
    server reads the Cookie header to act as that user's key. The proxy removes it."""
    _, sbx = served
    opened = sbx.ports.open(HTTP_PORT)
    with httpx.Client(base_url=daemon.url, headers={"Origin": daemon.url}, timeout=30) as browser:
        login = browser.post("/console/api/session", json={"api_key": daemon.key})
        assert login.status_code == 200, login.text
        session = browser.cookies["corral_session"]
    # A new connection, as a browser opens for the port (a kept-alive API one stays the API's).
    answer = httpx.get(
        opened.path_url + "steal",
        headers={"X-Corral-Token": opened.token or "", "Cookie": f"x=1; corral_session={session}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    cookie = answer.json()["headers"].get("cookie", "")
    assert session not in cookie and "corral_session" not in cookie
    assert cookie == "x=1"  # the page's own cookies still reach it


def test_public_port_closed_port_and_nothing_listening(served: tuple[Client, Sandbox]) -> None:
    _, sbx = served
    public = sbx.ports.open(HTTP_PORT + 1, public=True)
    assert public.public and public.token is None
    # Nothing listens on 8081 in the sandbox: a clear 502, not a hang.
    refused = httpx.get(public.path_url, timeout=30)
    assert refused.status_code == 502
    assert (
        f"nothing listens on port {HTTP_PORT + 1} in sandbox {sbx.id}" in refused.json()["message"]
    )
    sbx.ports.close(HTTP_PORT + 1)
    closed = httpx.get(public.path_url, timeout=30)
    assert closed.status_code == 404
    assert "is not open" in closed.json()["message"]
    # Re-opening the HTTP port public lets a request in without any token.
    sbx.ports.open(HTTP_PORT, public=True)
    try:
        assert (
            httpx.get(public.path_url.replace(str(HTTP_PORT + 1), str(HTTP_PORT))).status_code
            == 200
        )
    finally:
        sbx.ports.open(HTTP_PORT, public=False)


def test_streams_a_large_upload_and_download(served: tuple[Client, Sandbox]) -> None:
    _, sbx = served
    opened = sbx.ports.open(HTTP_PORT)
    size = 48 << 20
    block = hashlib.sha256(b"seed").digest() * 32768  # 1 MiB
    headers = {"X-Corral-Token": opened.token or ""}

    def chunks() -> Iterator[bytes]:
        for _ in range(size // len(block)):
            yield block

    expected = hashlib.sha256(block * (size // len(block))).hexdigest()
    with httpx.Client(headers=headers, timeout=120) as http:
        # Chunked (a generator) and then Content-Length, on one kept-alive connection.
        chunked = http.post(opened.path_url + "upload", content=chunks())
        assert chunked.json() == {"size": size, "sha256": expected}
        counted = http.post(opened.path_url + "upload", content=block * (size // len(block)))
        assert counted.json() == {"size": size, "sha256": expected}
        digest, got = hashlib.sha256(), 0
        with http.stream("GET", f"{opened.path_url}download/{size}") as answer:
            assert answer.status_code == 200
            for data in answer.iter_raw():
                digest.update(data)
                got += len(data)
        assert got == size
        assert digest.hexdigest() == hashlib.sha256((bytes(range(256)) * 4096) * 48).hexdigest()


def test_websocket_echo_by_path_and_by_host(daemon: Daemon, served: tuple[Client, Sandbox]) -> None:
    _, sbx = served
    opened = sbx.ports.open(WS_PORT)
    host, port = _host_of(daemon)
    path_ws = f"ws://{host}:{port}/sandboxes/{sbx.id}/ports/{WS_PORT}/?corral_token={opened.token}"
    with ws_connect(path_ws, max_size=None) as ws:
        for message in ("hello", b"\x00binary" * 1000, "x" * (3 << 20)):
            ws.send(message)
            assert ws.recv() == message
    # By host name, the token as a header; the socket goes to the daemon's own address.
    sock = socket.create_connection((host, port))
    with ws_connect(
        f"ws://{WS_PORT}-{sbx.id}.localhost:{port}/",
        sock=sock,
        additional_headers={"X-Corral-Token": opened.token or ""},
    ) as ws:
        ws.send("by host")
        assert ws.recv() == "by host"
    no_token = f"ws://{host}:{port}/sandboxes/{sbx.id}/ports/{WS_PORT}/"
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused, ws_connect(no_token):
        pass
    assert refused.value.response.status_code == 401


def test_a_request_wakes_a_parked_sandbox(served: tuple[Client, Sandbox]) -> None:
    _, sbx = served
    opened = sbx.ports.open(HTTP_PORT)
    sbx.park()
    assert sbx.info().state == "parked"
    answer = httpx.get(
        opened.path_url + "after-wake", headers={"X-Corral-Token": opened.token or ""}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["path"] == "/after-wake"
    assert sbx.info().state == "running"


def test_request_heads_are_bounded(daemon: Daemon, served: tuple[Client, Sandbox]) -> None:
    _, sbx = served
    opened = sbx.ports.open(HTTP_PORT)
    big = {"X-Big": "y" * (70 * 1024)}
    assert httpx.get(opened.path_url, headers=big).status_code == 431
    assert httpx.get(f"{daemon.url}/healthz", headers=big).status_code == 431
    # A later head on a kept-alive API connection is bounded too.
    with httpx.Client() as http:
        assert http.get(f"{daemon.url}/healthz").status_code == 200
        assert http.get(f"{daemon.url}/healthz", headers=big).status_code == 431


def test_cli_port_open_ls_close(daemon: Daemon, served: tuple[Client, Sandbox]) -> None:
    _, sbx = served
    opened = daemon.cli("port", "open", sbx.id, str(HTTP_PORT), "--json")
    assert opened.returncode == 0, opened.stderr.decode()
    info = json.loads(opened.stdout)
    assert info["url"] and info["token"]
    answer = httpx.get(info["path_url"] + "cli", headers={"X-Corral-Token": info["token"]})
    assert answer.status_code == 200
    listed = json.loads(daemon.cli("port", "ls", sbx.id, "--json").stdout)
    assert HTTP_PORT in [item["port"] for item in listed]
    public = json.loads(daemon.cli("port", "open", sbx.id, "7000", "--public", "--json").stdout)
    assert public["public"] is True and public["token"] is None
    closed = daemon.cli("port", "close", sbx.id, "7000")
    assert closed.returncode == 0, closed.stderr.decode()
    assert httpx.get(public["path_url"]).status_code == 404


def _fetch_in(sbx: Sandbox, url: str) -> str | None:
    code = (
        f"import urllib.request\nprint(urllib.request.urlopen({url!r}, timeout=30).read().decode())"
    )
    result = sbx.exec(["python3", "-c", code], timeout=60)
    return result.stdout if result.exit_code == 0 else None


def test_a_sandbox_port_as_a_project_service(
    daemon: Daemon, served: tuple[Client, Sandbox]
) -> None:
    client, sbx = served
    added = client.services.add("api.project", sandbox=sbx.id, port=HTTP_PORT)
    assert added.sandbox_id == sbx.id and added.address.startswith("169.254.10")
    caller = client.create_sandbox(network="project")
    try:
        seen = _fetch_in(caller, f"http://api.project:{HTTP_PORT}/from-a-sandbox")
        assert seen is not None and json.loads(seen)["path"] == "/from-a-sandbox"
        info = json.loads(daemon.cli("info", sbx.id, "--json").stdout)
        assert info["serves_as"] == ["api.project"]
        assert "api.project" in json.loads(daemon.cli("info", caller.id, "--json").stdout)["names"]
        # A parked target with auto-wake wakes for a service connection too.
        sbx.park()
        seen = _fetch_in(caller, f"http://api.project:{HTTP_PORT}/after-park")
        assert seen is not None and json.loads(seen)["path"] == "/after-park"
        assert sbx.info().state == "running"
        # Out of the project modes the same name goes nowhere, at once.
        caller.network.update(mode="airgapped")
        assert _fetch_in(caller, f"http://api.project:{HTTP_PORT}/") is None
        caller.network.update(mode="internet")
        assert _fetch_in(caller, f"http://{added.address}:{HTTP_PORT}/") is None
    finally:
        caller.kill()
        client.services.remove("api.project")
    listed = daemon.cli("service", "ls")
    assert "api.project" not in listed.stdout.decode()


def _raw_exchange(daemon: Daemon, data: bytes) -> bytes:
    """Send ``data`` on one connection to the daemon and read until it closes."""
    with socket.create_connection(_host_of(daemon), timeout=30) as sock:
        sock.sendall(data)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    return got


def test_attacks_on_the_inbound_proxy_fail(daemon: Daemon, served: tuple[Client, Sandbox]) -> None:
    client, sbx = served
    opened = sbx.ports.open(HTTP_PORT)
    other = client.create_sandbox()
    try:
        other.ports.open(HTTP_PORT)  # open, token needed, nothing listening
        # Authorized for one sandbox, then a second request on the same connection for
        # another sandbox's port: the connection ends; the second never reaches anything.
        first = (
            f"GET /sandboxes/{sbx.id}/ports/{HTTP_PORT}/one HTTP/1.1\r\nHost: x\r\n"
            f"X-Corral-Token: {opened.token}\r\n\r\n"
        )
        second = f"GET /sandboxes/{other.id}/ports/{HTTP_PORT}/two HTTP/1.1\r\nHost: x\r\n\r\n"
        got = _raw_exchange(daemon, (first + second).encode())
        assert got.count(b"HTTP/1.1 ") == 1 and b'"/one"' in got and b"/two" not in got
        # ... nor the daemon's API with no key, by a later request on the connection.
        api = "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n"
        got = _raw_exchange(daemon, (first + api).encode())
        assert got.count(b"HTTP/1.1 ") == 1 and b'"sandboxes":' not in got
        # A head with both Content-Length and chunked (request smuggling) is refused.
        smuggle = (
            f"POST /sandboxes/{sbx.id}/ports/{HTTP_PORT}/s HTTP/1.1\r\nHost: x\r\n"
            f"X-Corral-Token: {opened.token}\r\nContent-Length: 4\r\n"
            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        assert _raw_exchange(daemon, smuggle.encode()).startswith(b"HTTP/1.1 400 ")
        # A port token is no API key, and an API key is no port token.
        with_token = httpx.get(
            f"{daemon.url}/v1/sandboxes", headers={"Authorization": f"Bearer {opened.token}"}
        )
        assert with_token.status_code == 401
        with_key = httpx.get(opened.path_url, headers={"X-Corral-Token": daemon.key})
        assert with_key.status_code == 403
    finally:
        other.kill()
