"""The replication TLS rule ([cluster] tls and its default) as a table, and the links' client
context: the broker's own certificate presented, the peer's checked against [tls] cafile and
its name, replaced by a reload."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from streamlet.broker.config.model import ConfigError
from streamlet.broker.protocols import load
from streamlet.broker.replication.peer import PeerLogin
from streamlet.broker.tls import ServerTls, client_context

TLS = '[tls]\nport = 5551\ncertfile = "c.pem"\nkeyfile = "k.pem"\n'
TLS_ONLY = TLS + "[listeners.rabbitmq]\nenabled = false\n"


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load(path, data_dir=str(tmp_path / "data"))


@pytest.mark.parametrize(("text", "tls"), [
    pytest.param("", False, id="no [tls]: plaintext"),
    pytest.param(TLS, False, id="[tls] beside the plain listener: plaintext"),
    pytest.param(TLS_ONLY, True, id="TLS only: over TLS"),
    pytest.param(TLS + "[cluster]\ntls = true\n", True, id="asked for beside the plain listener"),
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


def _tls_cfg(tmp_path: Path, certs: Path, cafile: bool = True):  # type: ignore[no-untyped-def]
    ca = f'cafile = "{certs / "ca.crt"}"\n' if cafile else ""
    cfg = _load(tmp_path, f'[tls]\ncertfile = "{certs / "server.crt"}"\n'
                          f'keyfile = "{certs / "server.key"}"\n{ca}'
                          "[listeners.rabbitmq]\nenabled = false\n")
    assert cfg.tls is not None
    return cfg.tls


@pytest.mark.process
def test_the_client_context_checks_the_peer_and_its_name(tmp_path: Path, certs: Path) -> None:
    ctx = client_context(_tls_cfg(tmp_path, certs))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert any("streamlet-test-ca" in str(c.get("subject")) for c in ctx.get_ca_certs())


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
