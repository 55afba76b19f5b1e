"""The credential broker: TLS interception of the hosts a sandbox's secrets are bound to.

- ``injection.py``: what the broker is told per sandbox (``Injection``, ``SecretSource``);
- ``authority.py``: the workspace CA and the leaf certificates it issues per host name;
- ``rewrite.py``: the request stream rewriter (httptools) that swaps placeholders for values;
- ``sigv4.py``: AWS SigV4 re-signing with the real keys (botocore's signer);
- ``tls.py``: one TLS end over a socket, driven through ``ssl.MemoryBIO``;
- ``intercept.py``: one intercepted connection, end to end.

Nothing here knows the store: the service hands the broker ``Injection``s through a
``SecretSource`` and reads the audit from it.
"""

from corral.network.broker.authority import CertificateAuthority
from corral.network.broker.injection import Injection, SecretSource

__all__ = ["CertificateAuthority", "Injection", "SecretSource"]
