"""The upstream of the broker's e2e tests, run inside a namespace the test made: HTTPS (behind
the test's own CA) on API:443 and OTHER:443, plain HTTP on API:80, and DNS for ZONE on DNS:53.
Every request it gets is appended to LOG as one JSON line (which address, Host, target,
headers, body); it answers only "ok", "verified", "bad signature" or a redirect, so nothing it
saw goes back to the sandbox. A request signed with SigV4 is verified with the real AWS keys
(env REAL_AWS_KEY_ID / REAL_AWS_SECRET). Args: API OTHER DNS ZONE_JSON SERVER_PEM LOG."""

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

API, OTHER, DNS, ZONE_JSON, SERVER_PEM, LOG = sys.argv[1:7]
ZONE: dict[str, str] = {
    name.rstrip(".") + ".": addr for name, addr in json.loads(ZONE_JSON).items()
}
OTHER_NAME = next(name.rstrip(".") for name, addr in ZONE.items() if addr == OTHER)
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # head and body are two writes: no 40 ms delayed-ACK stall

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        tls = isinstance(self.connection, ssl.SSLSocket)
        scheme = "https" if tls else "http"
        host = self.headers.get("Host", "")
        entry = {
            "server": self.server.server_address[0],  # type: ignore[index]
            "tls": tls,
            "host": host,
            "method": self.command,
            "target": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("latin-1"),
        }
        status, answer, extra = 200, b"ok\n", {}
        if self.path.startswith("/redirect"):
            status, answer = 302, b""
            extra = {"Location": f"https://{OTHER_NAME}/landing"}
        elif self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256"):
            good = verify(
                self.command,
                f"{scheme}://{host}{self.path}",
                dict(self.headers.items()),
                body,
                os.environ["REAL_AWS_KEY_ID"],
                os.environ["REAL_AWS_SECRET"],
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


def serve_udp() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((DNS, 53))
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
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(SERVER_PEM)
    servers: list[socketserver.BaseServer] = [ThreadingHTTPServer((API, 80), Handler)]
    for address in (API, OTHER):
        server = ThreadingHTTPServer((address, 443), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        servers.append(server)
    servers.append(socketserver.ThreadingTCPServer((DNS, 53), DnsTcp))
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Thread(target=serve_udp, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)


if __name__ == "__main__":
    main()
