"""The TLS listener's context, the context of the links to other brokers (replication over
TLS), and the client certificate's identity (SASL EXTERNAL)."""

from __future__ import annotations

import ssl
from typing import Any

from .config.model import ConfigError, TlsConfig


def server_context(cfg: TlsConfig, client_certificates: bool = True) -> ssl.SSLContext:
    """A TLS listener's context; ``client_certificates`` False: none asked for, whatever
    [tls] verify_peer says (the management API's HTTPS, whose login is Basic auth)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.certfile, cfg.keyfile)
        if cfg.cafile is not None:
            ctx.load_verify_locations(cfg.cafile)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"[tls]: cannot load certificates: {e}") from e
    # with a CA but no verify_peer a client certificate is checked when one is offered
    ctx.verify_mode = (ssl.CERT_NONE if not client_certificates
                       else ssl.CERT_REQUIRED if cfg.verify_peer
                       else ssl.CERT_OPTIONAL if cfg.cafile is not None else ssl.CERT_NONE)
    return ctx


def client_context(cfg: TlsConfig) -> ssl.SSLContext:
    """How this broker connects to the other brokers' TLS listeners: their certificates are
    checked against [tls] cafile and must name the host they are reached at (cluster.peers, a
    leader's address); this broker's own certificate is presented, which their verify_peer
    asks for (one certificate serves both ends: with extended key usages it needs clientAuth
    as well as serverAuth). Without a cafile: the system's CAs, and the certificates of
    [tls] certfile itself (this broker's, and the chain after it), so brokers sharing one
    certificate (a Kubernetes Secret mounted in every pod) accept each other."""
    try:
        ctx = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=str(cfg.cafile) if cfg.cafile is not None else None)
        if cfg.cafile is None:
            ctx.load_verify_locations(cfg.certfile)
            ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a trusted non-root ends a chain
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cfg.certfile, cfg.keyfile)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"[tls]: cannot load certificates: {e}") from e
    return ctx


class ServerTls:
    """The context every TLS listener was made with, whose certificate can be replaced while
    they listen.

    asyncio and uvloop hand a listener's context to each accepted connection and offer no way
    to give a listening server another, so the listening context's SNI callback (which
    OpenSSL calls on every ClientHello, with or without a server name) moves each new
    handshake onto the current context. A connection keeps the context it shook hands with:
    open connections are not disturbed by a reload.

    ``peers``: the brokers' links to each other use TLS too; ``client`` is then their
    current context (client_context), replaced by a reload as ``current`` is: new links
    present the new certificate, open ones keep theirs. ``web_listening``: the same for the
    management API's HTTPS, which asks for no client certificate."""

    def __init__(self, cfg: TlsConfig, peers: bool = False) -> None:
        self.cfg = cfg
        self.peers = peers
        self.listening = self.current = server_context(cfg)
        self.listening.sni_callback = self._use_current
        self.web_listening = self.web_current = server_context(cfg, client_certificates=False)
        self.web_listening.sni_callback = self._use_web_current
        self.client = client_context(cfg) if peers else None

    def _use_current(self, conn: ssl.SSLObject, server_name: str | None,
                     ctx: ssl.SSLContext) -> None:
        current = self.current
        if current is not ctx:
            conn.context = current

    def _use_web_current(self, conn: ssl.SSLObject, server_name: str | None,
                         ctx: ssl.SSLContext) -> None:
        current = self.web_current
        if current is not ctx:
            conn.context = current

    def reload(self) -> None:
        """Read [tls]'s files again for the handshakes from now on; on ConfigError (a file
        unreadable, a certificate or key unparsable, a key not the certificate's) the
        current certificate stays (every context is made before any is replaced)."""
        current = server_context(self.cfg)
        web = server_context(self.cfg, client_certificates=False)
        self.client = client_context(self.cfg) if self.peers else None
        self.current, self.web_current = current, web


def peer_common_name(peercert: dict[str, Any] | None) -> str | None:
    """The CN of a verified client certificate (what RabbitMQ's EXTERNAL uses by default)."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
