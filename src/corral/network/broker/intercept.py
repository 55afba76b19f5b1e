"""The broker as the egress proxy sees it: which connections it takes, and serving one.

``Broker.claims`` takes a TLS connection only when all of these hold, else the proxy splices it
untouched (and the placeholder, if sent, reaches the far end unchanged):

- port 443 and an SNI name (plain HTTP is never given a secret: a downgrade gets nothing);
- some secret of the sandbox is bound to that name;
- the destination address is one the sandbox's own resolver answered for that name.

``Broker.serve`` then connects upstream first -- TLS verified against the host's trust store
(or ``upstream_ca``) for that name, ALPN ``http/1.1`` -- and only if that succeeds answers the
sandbox with a leaf for the name from the workspace CA. Requests flow through
``RequestRewriter`` (which checks each request's ``Host`` against the name); responses flow
back unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from pathlib import Path

from corral.network.broker.authority import CertificateAuthority
from corral.network.broker.injection import Injection, SecretSource
from corral.network.broker.rewrite import BodyBudget, RequestRewriter
from corral.network.broker.tls import TlsEnd

__all__ = ["Broker"]

log = logging.getLogger(__name__)
TLS_PORT = 443


class Broker:
    def __init__(
        self,
        authority: CertificateAuthority,
        source: SecretSource,
        *,
        upstream_ca: Path | None = None,
        handshake_timeout: float = 10.0,
        idle_timeout: float = 300.0,
    ) -> None:
        self.authority = authority
        self.source = source
        context = ssl.create_default_context(cafile=str(upstream_ca) if upstream_ca else None)
        context.set_alpn_protocols(["http/1.1"])
        self._upstream = context
        self._handshake = handshake_timeout
        self._idle = idle_timeout
        self._budget = BodyBudget()

    def claims(
        self, sandbox_id: str, name: str | None, address: str, port: int, answered: bool
    ) -> bool:
        """Whether to intercept (``answered``: the resolver gave ``address`` for ``name``)."""
        if name is None or port != TLS_PORT or not answered:
            return False
        return any(inj.covers(name) for inj in self.source.injections(sandbox_id))

    async def serve(
        self,
        sandbox_id: str,
        name: str,
        client: socket.socket,
        upstream: socket.socket,
        head: bytes,
    ) -> None:
        """Serve one claimed connection whose ClientHello is ``head`` and whose ``upstream``
        socket is connected. Returns when both directions are done; raises on failure."""
        # Decrypted records are written as they come: no Nagle delay behind a small one.
        with contextlib.suppress(OSError):  # not TCP (a test's socketpair)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        far = TlsEnd(
            upstream,
            self._upstream,
            server_side=False,
            server_hostname=name,
            idle_timeout=self._idle,
        )
        await far.handshake(self._handshake)
        near = TlsEnd(
            client,
            self.authority.server_context(name),
            server_side=True,
            initial=head,
            idle_timeout=self._idle,
        )
        await near.handshake(self._handshake)

        def used(inj: Injection, method: str, path: str) -> None:
            self.source.used(sandbox_id, inj.secret, name, method, path)

        rewriter = RequestRewriter(
            name, lambda: self.source.injections(sandbox_id), used, budget=self._budget
        )

        async def requests() -> None:
            while data := await near.recv():
                out = rewriter.feed(data)
                if rewriter.to_client:
                    reply, rewriter.to_client = rewriter.to_client, b""
                    await near.send(reply)
                if out:
                    await far.send(out)
            await far.shutdown()

        async def responses() -> None:
            while data := await far.recv():
                await near.send(data)
            await near.shutdown()

        tasks = [asyncio.create_task(requests()), asyncio.create_task(responses())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
            await asyncio.gather(*tasks)
        finally:
            rewriter.close()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
