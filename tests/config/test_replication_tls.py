"""The replication TLS rule ([cluster] tls and its default) as a table, and the links' client
context: the broker's own certificate presented, the peer's checked against [tls] cafile (or,
without one, against the broker's own certificate) and its name, replaced by a reload."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from streamlet.broker.config.model import ConfigError
from streamlet.broker.protocols import load
from streamlet.broker.replication.peer import PeerLogin
from streamlet.broker.tls import ServerTls, client_context, server_context
from tests.support.certs import issue

TLS = '[tls]\nport = 5551\ncertfile = "c.pem"\nkeyfile = "k.pem"\n'
TLS_ONLY = TLS + "[listeners.rabbitmq]\nenabled = false\n"


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load(path, data_dir=str(tmp_path / "data"))


@pytest.mark.parametrize(("text", "tls"), [
    pytest.param("", False, id="no [tls]: plaintext"),
    pytest.param(TLS, True, id="[tls] beside the plain listener: over TLS all the same"),
    pytest.param(TLS_ONLY, True, id="TLS only: over TLS"),
    pytest.param(TLS + "[cluster]\ntls = true\n", True, id="said outright beside the plain listener"),
    pytest.param(TLS + "[cluster]\ntls = false\n", False, id="plaintext said outright"),
    pytest.param(TLS_ONLY + "[cluster]\ntls = true\n", True, id="TLS only, said outright"),
])
def test_replication_tls_rule(tmp_path: Path, text: str, tls: bool) -> None:
    assert _load(tmp_path, text).replication_tls is tls


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("[cluster]\ntls = true\n", r"\[cluster\] tls = true needs a \[tls\] section",
                 id="TLS without a certificate"),
    pytest.param(TLS_ONLY + "[cluster]\ntls = false\n",
                 r"\[cluster\] tls = false needs the plain listener", id="no plaintext port"),
    pytest.param('[cluster]\ntls = "yes"\n', r"cluster\.tls must be true or false",
                 id="not a boolean"),
])
def test_bad_replication_tls_is_refused_with_a_reason(tmp_path: Path, text: str,
                                                      message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text)


def _tls_cfg(tmp_path: Path, certs: Path, cafile: bool = True,  # type: ignore[no-untyped-def]
             cert: str = "server"):
    ca = f'cafile = "{certs / "ca.crt"}"\n' if cafile else ""
    cfg = _load(tmp_path, f'[tls]\ncertfile = "{certs / f"{cert}.crt"}"\n'
                          f'keyfile = "{certs / f"{cert}.key"}"\n{ca}'
                          "[listeners.rabbitmq]\nenabled = false\n")
    assert cfg.tls is not None
    return cfg.tls


@pytest.mark.process
def test_the_client_context_checks_the_peer_and_its_name(tmp_path: Path, certs: Path) -> None:
    ctx = client_context(_tls_cfg(tmp_path, certs))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert any("streamlet-test-ca" in str(c.get("subject")) for c in ctx.get_ca_certs())


async def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    """One TLS handshake on loopback, as a link to 127.0.0.1 makes it; raises when refused."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listening = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    try:
        port = listening.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        writer.close()
    finally:
        listening.close()


@pytest.mark.process
async def test_without_a_cafile_the_links_accept_the_brokers_own_certificate_only(
        tmp_path: Path, certs: Path) -> None:
    """Brokers sharing one certificate and no cafile (a Secret without ca.crt): a link checks
    the other broker against this broker's own certificate, and refuses another one, even of
    the same CA."""
    issue(certs, "other", "localhost", server=True)
    tls = _tls_cfg(tmp_path, certs, cafile=False)
    links = client_context(tls)
    await _handshake(server_context(tls), links)
    other = _tls_cfg(tmp_path, certs, cafile=False, cert="other")
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(server_context(other), links)
    # with the CA as cafile, any certificate of it naming the host is accepted
    await _handshake(server_context(other), client_context(_tls_cfg(tmp_path, certs)))


@pytest.mark.process
def test_unreadable_certificates_are_a_config_error(tmp_path: Path, certs: Path) -> None:
    cfg = _tls_cfg(tmp_path, certs)
    (certs / "server.key").write_text("not a key")
    with pytest.raises(ConfigError, match="cannot load certificates"):
        client_context(cfg)


@pytest.mark.process
def test_a_reload_replaces_the_links_context_too(tmp_path: Path, certs: Path) -> None:
    tls = ServerTls(_tls_cfg(tmp_path, certs), peers=True)
    login = PeerLogin("u", "p", lambda: tls.client)
    before = login.context()
    assert before is not None
    tls.reload()
    assert login.context() is tls.client and tls.client is not before
    (certs / "server.crt").write_text("broken")
    with pytest.raises(ConfigError):
        tls.reload()
    assert login.context() is tls.client  # the last good one stays


@pytest.mark.process
def test_plaintext_links_have_no_context(tmp_path: Path, certs: Path) -> None:
    assert ServerTls(_tls_cfg(tmp_path, certs), peers=False).client is None
    assert PeerLogin("u", "p").context() is None
