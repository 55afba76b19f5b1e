"""A loopback lab for the credential broker (tests and bench/broker.py): a test CA, an HTTPS
upstream on 127.0.0.1 behind it that records what it received, and a "sandbox" client that trusts
the workspace CA and talks through ``Broker.serve`` (or through a plain splice, the baseline)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def make_test_ca(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A CA (``ca.pem``) and a server chain+key for ``hosts`` (``server.pem``) in ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corral test upstream CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + leaf.public_bytes(pem)
    )
    return directory / "ca.pem", directory / "server.pem"


@dataclass
class Upstream:
    """An HTTPS server answering every request ``200 ok``, keeping each request head it saw."""

    server_pem: Path
    heads: list[bytes] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None

    async def start(self) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_pem)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def sandbox_connection(
    serve: object, host: str, trust: Path, upstream_port: int
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A TLS client (trusting ``trust``, SNI ``host``) whose bytes go through ``serve(client_sock,
    upstream_sock, first_flight)`` -- the broker, or a splice -- to the upstream."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    upstream = socket.create_connection(("127.0.0.1", upstream_port))
    upstream.setblocking(False)
    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    loop = asyncio.get_running_loop()

    async def run() -> None:
        head = await loop.sock_recv(theirs, 16384)
        await serve(theirs, upstream, head)  # type: ignore[operator]

    task = asyncio.create_task(run())
    context = ssl.create_default_context(cafile=str(trust))
    reader, writer = await asyncio.open_connection(sock=ours, ssl=context, server_hostname=host)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 5)
        task.cancel()
        theirs.close()
        upstream.close()


async def splice(client: socket.socket, upstream: socket.socket, head: bytes) -> None:
    """The baseline: what the egress proxy does with a connection it does not intercept."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(upstream, head)

    async def pipe(source: socket.socket, target: socket.socket) -> None:
        while data := await loop.sock_recv(source, 262144):
            await loop.sock_sendall(target, data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    await asyncio.gather(pipe(client, upstream), pipe(upstream, client))


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> bytes:
    writer.write(head)
    await writer.drain()
    answer = await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(2)
    return answer
