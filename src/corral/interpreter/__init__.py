"""The code interpreter server that runs INSIDE code-interpreter sandboxes.

It speaks E2B's code-interpreter protocol on port 49999 (``POST /execute`` answering an NDJSON
stream, ``/contexts`` to create, list, restart and remove contexts, ``GET /health``), so that the
official ``e2b-code-interpreter`` SDK and corral's own ``sbx.run_code`` use the same server. Each
context is one Jupyter kernel (``ipykernel`` for Python, ``bash_kernel`` for Bash, any other
installed kernelspec by its language), driven through ``jupyter_client``; its state lives in the
kernel's process, so it survives park/wake and is copied by fork like any process.

This package is not imported by the daemon: the ``code-interpreter`` recipe copies its files into
the image as the package ``corral_interpreter`` (so it imports only the standard library and
``jupyter_client``, and only relatively), and the template's start command runs it with the
image's own Python, supervised by the agent (restarted if it exits). Modules:

- ``kernels``: contexts (one kernel each), the language table, start/restart/remove;
- ``execution``: one execution as a stream of protocol events (timeouts, interrupts, bounds);
- ``server``: the HTTP front (stdlib ``http.server``, chunked NDJSON);
- ``warm``: the warmup command (waits for the server, loads the common libraries).
"""

PORT = 49999
