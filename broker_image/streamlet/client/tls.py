"""The client side of TLS, for the CLI and `streamlet perf`: the server's certificate verified
against ``ca_cert`` (else the system's CAs), ``cert``/``key`` offered as the client's."""

from __future__ import annotations

import ssl
from pathlib import Path


def client_context(ca_cert: Path | None = None, cert: Path | None = None,
                   key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_cert) if ca_cert else None)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx
