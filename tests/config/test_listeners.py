"""The listener table: [server] and [tls] place RabbitMQ Stream's listeners, [listeners.<protocol>]
adds further protocols, and a protocol the broker does not speak is a clear error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamlet.broker.config.model import ConfigError, Listener
from streamlet.broker.protocols import LISTENERS, load
from streamlet.broker.server import Broker

TLS = '[tls]\nport = 5551\ncertfile = "c.pem"\nkeyfile = "k.pem"\n'


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load(path, data_dir=str(tmp_path / "data"))


@pytest.mark.parametrize(("text", "listeners"), [
    ("", [Listener("rabbitmq", "127.0.0.1", 5552)]),
    ('[server]\nhost = "0.0.0.0"\nport = 6000\n', [Listener("rabbitmq", "0.0.0.0", 6000)]),
    (TLS, [Listener("rabbitmq", "127.0.0.1", 5552), Listener("rabbitmq", "127.0.0.1", 5551, tls=True)]),
    (TLS + "[listeners.rabbitmq]\nenabled = false\n", [Listener("rabbitmq", "127.0.0.1", 5551, tls=True)]),
    ("[listeners.mega]\nport = 5560\n", [Listener("rabbitmq", "127.0.0.1", 5552),
                                          Listener("mega", "127.0.0.1", 5560)]),
    ('[listeners.mega]\nport = 5560\nhost = "::1"\nenabled = false\n', [Listener("rabbitmq", "127.0.0.1", 5552)]),
])
def test_listeners_from_the_config(tmp_path: Path, text: str, listeners: list[Listener]) -> None:
    assert list(_load(tmp_path, text).listeners) == listeners


@pytest.mark.parametrize(("text", "message"), [
    ("[listeners.mega]\nhost = \"x\"\n", "[listeners.mega] needs a port"),
    ("[listeners.mega]\nport = 70000\n", "listeners.mega.port must be in 1..65535"),
    ("[listeners.mega]\nport = 5560\ntls = true\n", "tls = true needs a [tls] section"),
    ("[listeners.rabbitmq]\nenabled = false\n", "no listener"),
    ("[listeners.rabbitmq]\nport = 1\n", "takes only enabled"),
    ("[listeners]\nmega = 1\n", "one table per protocol"),
])
def test_bad_listener_tables_are_refused_with_a_reason(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        _load(tmp_path, text)


def test_a_protocol_the_broker_does_not_speak_is_a_config_error(tmp_path: Path) -> None:
    config = _load(tmp_path, "[listeners.amqp]\nport = 5560\n")
    with pytest.raises(ConfigError, match=r"no such protocol: \[listeners\.amqp\] \(this broker speaks "):
        Broker(config, LISTENERS)


@pytest.mark.parametrize(("text", "message"), [
    ('[listeners.mega]\nport = 5560\nhost = "0.0.0.0"\n', "loopback only"),
    (TLS + '[listeners.mega]\nport = 5560\nhost = "0.0.0.0"\ntls = true\n', "loopback only"),
    ("[listeners.mega]\nport = 5560\nmax_payload_bytes = 16777217\n", "max_payload_bytes must be"),
    ("[listeners.mega]\nport = 5560\nmax_topic_bytes = 256\n", "max_topic_bytes must be"),
])
def test_mega_has_no_authentication_so_loopback_only(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text)


def test_mega_over_tls_with_client_certificates_may_listen_anywhere(tmp_path: Path) -> None:
    text = (TLS + 'cafile = "ca.pem"\nverify_peer = true\n'
            + '[listeners.mega]\nport = 5560\nhost = "0.0.0.0"\ntls = true\n')
    assert Listener("mega", "0.0.0.0", 5560, tls=True) in _load(tmp_path, text).listeners


@pytest.mark.parametrize(("text", "flag", "mega"), [
    ("", None, []),
    ("", 5570, [Listener("mega", "127.0.0.1", 5570)]),
    ('[server]\nhost = "0.0.0.0"\n', 5570, [Listener("mega", "127.0.0.1", 5570)]),
    ('[listeners.mega]\nport = 5560\nhost = "::1"\n', 5570, [Listener("mega", "::1", 5570)]),
    ("[listeners.mega]\nport = 5560\n", 0, []),
])
def test_mega_port_flag(tmp_path: Path, text: str, flag: int | None, mega: list[Listener]) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    cfg = load(path, mega_port=flag, data_dir=str(tmp_path / "data"))
    assert [lst for lst in cfg.listeners if lst.protocol == "mega"] == mega


@pytest.mark.parametrize(("text", "flag", "ports"), [
    pytest.param("", None, (15692, None), id="nothing said: HTTP on 15692"),
    pytest.param(TLS, None, (15692, None), id="[tls] alone: HTTP only, as before"),
    pytest.param(TLS + "[listeners.metrics]\ntls_port = 15691\n", None, (15692, 15691),
                 id="tls_port: HTTPS beside HTTP on the default port"),
    pytest.param(TLS + "[listeners.metrics]\ntls_port = 15691\nport = 9000\n", None,
                 (9000, 15691), id="both said: both"),
    pytest.param(TLS + "[listeners.metrics]\ntls_port = 0\n", None, (15692, None),
                 id="tls_port 0: none"),
    pytest.param(TLS + "[listeners.metrics]\ntls_port = 15691\n", 9100, (9100, 15691),
                 id="--metrics-port moves the plain port, keeps HTTPS"),
])
def test_metrics_over_tls(tmp_path: Path, text: str, flag: int | None,
                          ports: tuple[int, int | None]) -> None:
    """[listeners.metrics] tls_port serves HTTPS beside the plain port, never instead of it
    (the readiness probe's)."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    metrics = load(path, metrics_port=flag, data_dir=str(tmp_path / "data")).metrics
    assert metrics is not None and (metrics.port, metrics.tls_port) == ports


@pytest.mark.parametrize(("text", "flag"), [
    pytest.param(TLS + "[listeners.metrics]\ntls_port = 15691\nport = 0\n", None,
                 id="port 0: the whole endpoint off"),
    pytest.param(TLS + "[listeners.metrics]\ntls_port = 15691\nenabled = false\n", None,
                 id="enabled = false"),
    pytest.param(TLS + "[listeners.metrics]\ntls_port = 15691\n", 0, id="--metrics-port 0"),
])
def test_metrics_off_takes_tls_port_with_it(tmp_path: Path, text: str, flag: int | None) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert load(path, metrics_port=flag, data_dir=str(tmp_path / "data")).metrics is None


@pytest.mark.parametrize(("text", "message"), [
    ("[listeners.metrics]\ntls_port = 15691\n", "[listeners.metrics] tls_port needs a [tls] section"),
    (TLS + "[listeners.metrics]\ntls_port = 70000\n", "listeners.metrics.tls_port must be in 1..65535"),
    (TLS + "[listeners.metrics]\ntls_port = 9000\nport = 9000\n",
     "[listeners.metrics] port and tls_port are both 9000"),
    (TLS + "[listeners.metrics]\ntls_port = 15692\n",
     "[listeners.metrics] port and tls_port are both 15692"),
    ("[listeners.metrics]\nssl_port = 15691\n", "unknown key(s) in [listeners.metrics]: ssl_port"),
])
def test_bad_metrics_tls_port(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _load(tmp_path, text)
