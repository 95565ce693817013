"""The TLS listener's context and the client certificate's identity (SASL EXTERNAL)."""

from __future__ import annotations

import ssl
from typing import Any

from .config import ConfigError, TlsConfig


def server_context(cfg: TlsConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.certfile, cfg.keyfile)
        if cfg.cafile is not None:
            ctx.load_verify_locations(cfg.cafile)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"[tls]: cannot load certificates: {e}") from e
    # with a CA but no verify_peer a client certificate is checked when one is offered
    ctx.verify_mode = (ssl.CERT_REQUIRED if cfg.verify_peer
                       else ssl.CERT_OPTIONAL if cfg.cafile is not None else ssl.CERT_NONE)
    return ctx


def peer_common_name(peercert: dict[str, Any] | None) -> str | None:
    """The CN of a verified client certificate (what RabbitMQ's EXTERNAL uses by default)."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
