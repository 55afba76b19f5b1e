"""The inbound proxy: outside HTTP/1.1 and WebSocket clients reach a sandbox's open port.

Routes (the daemon's own listener; ``api/front.py`` hands over the connections they start):

- by path: ``/sandboxes/ID/ports/PORT/REST`` goes to ``/REST`` on the port (with
  ``X-Forwarded-Prefix: /sandboxes/ID/ports/PORT``);
- by host name: ``Host: PORT-ID.<any domain>`` goes to the same path on the port (E2B's
  scheme; ports that the app itself serves under that scheme, E2B's envd, are left to it).

Credentials (``service.ports.PortService.check_access``): the port's token in the
``X-Corral-Token`` header, the ``corral_token`` query parameter, or the ``corral_token`` cookie;
a public port needs none. All three are removed before the request goes on, and so is the web
console's session cookie (``corral_session``), which a browser sends to path routes too. Path
routes share the daemon's origin with the console, so their answers are isolated
(``isolate_answer_head``: a ``Content-Security-Policy: sandbox`` gives a sandbox's page an
origin of its own) and each connection carries one answer (``Connection: close``). A GET
or HEAD with the token in its query is answered with a redirect to the same URL without it that
sets the cookie (scoped to the route), so a browser can follow links while the token leaves the
address bar. Then the sandbox is resolved (a parked sandbox with auto-wake wakes now) and
connected to.

Streaming: once the first request is let through, the connection's socket is taken out of its
asyncio transport and both directions are spliced in the kernel (``network/splice.py``): the
answers as they come, the requests too, but the proxy still finds the start of every later
request on a kept-alive connection (``Content-Length`` bodies spliced by count, chunked ones read
through ``h11``): each head is checked against the first request's target and rewritten; a
request for another sandbox or port (or the API) is not forwarded: the answers under way finish
(the port sees the end of the requests) and the connection closes. After an ``Upgrade``
request (WebSocket) everything is spliced as is.

Bounds: a request head at most ``max_head`` bytes (431), at most ``max_connections`` proxied
connections at once (503), the upstream connect within ``connect_timeout`` (504), the answers
still owed after the requests end within ``drain_timeout``. Errors are the
API's JSON ``{"code", "message"}`` with the status of ``corral.errcodes``; a port nothing listens
on is a 502 saying so.
"""

from corral.api.inbound.heads import HEAD_END, InboundRequest, error_answer
from corral.api.inbound.proxy import InboundProxy

__all__ = ["HEAD_END", "InboundProxy", "InboundRequest", "error_answer"]
