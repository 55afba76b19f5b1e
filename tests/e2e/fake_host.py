"""The fake hosts of the e2e tests and benches, run by ``hostlab.py`` inside a namespace the test
made: plain HTTP on :80 of every address in HTTP, HTTPS (behind the test's own CA, SERVER_PEM) on
:443 of every address in HTTPS, a TCP echo on every ``address:port`` in ECHO, and DNS on DNS:53
(UDP and TCP) answering A records from ZONE. Every HTTP request is appended to LOG as one JSON
line (which address, TLS or not, Host, method, target, headers, body); the answer is only
``page(address)``, "verified" / "bad signature" (a request signed with SigV4, checked with the
real keys in env REAL_AWS_KEY_ID / REAL_AWS_SECRET) or a redirect to OTHER_NAME (a target under
/redirect), so nothing a client sent goes back to it. Standalone (stdlib + dnspython); one
argument, the JSON of ``hostlab.Config``; prints "ready", serves until stdin closes."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dns.message
import dns.rcode
import dns.rrset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.sigv4_verify import verify

CONFIG: dict[str, object] = json.loads(sys.argv[1])
ZONE = {
    str(name).rstrip(".").lower() + ".": str(addr)
    for name, addr in dict(CONFIG["zone"]).items()  # type: ignore[call-overload]
}
LOG = str(CONFIG["log"])
OTHER_NAME = str(CONFIG.get("other_name") or "")
_lock = threading.Lock()


def page(address: str) -> bytes:
    """What a plain request to ``address`` gets (kept in step with ``hostlab.page``)."""
    return f"fake host {address}\n".encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # head and body are two writes: no 40 ms delayed-ACK stall

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        tls = isinstance(self.connection, ssl.SSLSocket)
        scheme = "https" if tls else "http"
        host = self.headers.get("Host", "")
        address = str(self.connection.getsockname()[0])
        entry: dict[str, object] = {
            "server": address,
            "tls": tls,
            "host": host,
            "method": self.command,
            "target": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("latin-1"),
        }
        status, answer, extra = 200, page(address), {}
        if self.path.startswith("/redirect") and OTHER_NAME:
            status, answer = 302, b""
            extra = {"Location": f"https://{OTHER_NAME}/landing"}
        elif self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256"):
            good = verify(
                self.command,
                f"{scheme}://{host}{self.path}",
                dict(self.headers.items()),
                body,
                os.environ.get("REAL_AWS_KEY_ID", ""),
                os.environ.get("REAL_AWS_SECRET", ""),
            )
            entry["sigv4_valid"] = good
            status, answer = (200, b"verified\n") if good else (403, b"bad signature\n")
        with _lock, open(LOG, "a") as log:
            log.write(json.dumps(entry) + "\n")
        self.send_response(status)
        for key, value in extra.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = do_PUT = do_DELETE = _handle

    def log_message(self, *args: object) -> None:
        pass


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


def answer(wire: bytes) -> bytes:
    query = dns.message.from_wire(wire)
    reply = dns.message.make_response(query)
    question = query.question[0]
    address = ZONE.get(question.name.to_text().lower())
    if address is None:
        reply.set_rcode(dns.rcode.NXDOMAIN)
    elif question.rdtype == 1:
        reply.answer.append(dns.rrset.from_text(question.name, 60, "IN", "A", address))
    return reply.to_wire()


def serve_udp(address: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 53))
    while True:
        data, peer = sock.recvfrom(4096)
        sock.sendto(answer(data), peer)


class DnsTcp(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        size = struct.unpack("!H", self.request.recv(2))[0]
        reply = answer(self.request.recv(size))
        self.request.sendall(struct.pack("!H", len(reply)) + reply)


def main() -> None:
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    ThreadingHTTPServer.allow_reuse_address = True
    servers: list[socketserver.BaseServer] = [
        ThreadingHTTPServer((str(address), 80), Handler)
        for address in CONFIG["http"]  # type: ignore[attr-defined]
    ]
    if CONFIG["https"]:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(CONFIG["server_pem"]))
        for address in CONFIG["https"]:  # type: ignore[attr-defined]
            server = ThreadingHTTPServer((str(address), 443), Handler)
            server.socket = context.wrap_socket(server.socket, server_side=True)
            servers.append(server)
    for endpoint in CONFIG["echo"]:  # type: ignore[attr-defined]
        address, port = str(endpoint).rsplit(":", 1)
        servers.append(socketserver.ThreadingTCPServer((address, int(port)), Echo))
    dns_address = str(CONFIG["dns"])
    servers.append(socketserver.ThreadingTCPServer((dns_address, 53), DnsTcp))
    for each in servers:
        threading.Thread(target=each.serve_forever, daemon=True).start()
    threading.Thread(target=serve_udp, args=(dns_address,), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)


if __name__ == "__main__":
    main()
