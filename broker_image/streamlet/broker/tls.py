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


class ServerTls:
    """The context every TLS listener was made with, whose certificate can be replaced while
    they listen.

    asyncio and uvloop hand a listener's context to each accepted connection and offer no way
    to give a listening server another, so the listening context's SNI callback (which
    OpenSSL calls on every ClientHello, with or without a server name) moves each new
    handshake onto the current context. A connection keeps the context it shook hands with:
    open connections are not disturbed by a reload."""

    def __init__(self, cfg: TlsConfig) -> None:
        self.cfg = cfg
        self.listening = self.current = server_context(cfg)
        self.listening.sni_callback = self._use_current

    def _use_current(self, conn: ssl.SSLObject, server_name: str | None,
                     ctx: ssl.SSLContext) -> None:
        current = self.current
        if current is not ctx:
            conn.context = current

    def reload(self) -> None:
        """Read [tls]'s files again for the handshakes from now on; on ConfigError (a file
        unreadable, a certificate or key unparsable, a key not the certificate's) the
        current certificate stays."""
        self.current = server_context(self.cfg)


def peer_common_name(peercert: dict[str, Any] | None) -> str | None:
    """The CN of a verified client certificate (what RabbitMQ's EXTERNAL uses by default)."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
