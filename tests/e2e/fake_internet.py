"""A fake internet, run by tests/e2e/test_network.py inside a namespace that test made:
HTTP on WEB:80 and OTHER:80 (each answers its own name), a TCP echo on WEB:9000, and DNS on
DNS:53 (UDP and TCP) for ZONE. Standalone (stdlib + dnspython); stopped by its pid."""

from __future__ import annotations

import socket
import socketserver
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dns.message
import dns.rcode
import dns.rrset

WEB, OTHER, DNS = "198.18.0.2", "198.18.0.3", "198.18.0.53"
ZONE = {"web.fake.test.": WEB, "other.fake.test.": OTHER}


class Web(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"fake internet {self.server.server_address[0]}\n".encode()  # type: ignore[index]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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
    servers: list[socketserver.BaseServer] = [
        ThreadingHTTPServer((WEB, 80), Web),
        ThreadingHTTPServer((OTHER, 80), Web),
        socketserver.ThreadingTCPServer((WEB, 9000), Echo),
        socketserver.ThreadingTCPServer((DNS, 53), DnsTcp),
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Thread(target=serve_udp, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)


if __name__ == "__main__":
    main()
