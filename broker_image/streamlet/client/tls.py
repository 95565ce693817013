"""The client side of TLS, for the CLI and `streamlet perf`: the server's certificate verified
against ``ca_cert`` (else the system's CAs), ``cert``/``key`` offered as the client's."""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path


def client_context(ca_cert: Path | None = None, cert: Path | None = None,
                   key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_cert) if ca_cert else None)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def pem_context(ca: str | None = None, cert: str | None = None,
                key: str | None = None) -> ssl.SSLContext:
    """The same from PEM text rather than files, for a process handed the text and not the
    files (a Spark executor): ``key`` None means the key is in ``cert``."""
    ctx = ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()
    if cert is not None:
        # load_cert_chain reads files only: a private directory, gone once loaded
        with tempfile.TemporaryDirectory(prefix="streamlet-tls-") as d:
            cert_path, key_path = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
            for path, text in ((cert_path, cert), (key_path, key)):
                if text is not None:
                    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                        f.write(text)
            ctx.load_cert_chain(cert_path, key_path if key is not None else None)
    return ctx
