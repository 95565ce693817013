"""[listeners.rsio] and serve --rsio-port: RSIO has no authentication, so loopback only unless TLS
with client certificates; its limits are checked against each other and the frame limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamlet.broker.config.model import BrokerConfig, ConfigError, Listener
from streamlet.broker.protocols import load
from streamlet.broker.rsio.settings import RsioSettings

TLS = '[tls]\nport = 5551\ncertfile = "c.pem"\nkeyfile = "k.pem"\n'


def _load(tmp_path: Path, text: str, rsio_port: int | None = None) -> BrokerConfig:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load(path, data_dir=str(tmp_path / "data"), rsio_port=rsio_port)


@pytest.mark.parametrize(("text", "flag", "rsio"), [
    ("", None, []),
    ("", 5570, [Listener("rsio", "127.0.0.1", 5570)]),
    ('[server]\nhost = "0.0.0.0"\n', 5570, [Listener("rsio", "127.0.0.1", 5570)]),
    ('[listeners.rsio]\nport = 5554\nhost = "::1"\n', None, [Listener("rsio", "::1", 5554)]),
    ('[listeners.rsio]\nport = 5554\nhost = "::1"\n', 5571, [Listener("rsio", "::1", 5571)]),
    ("[listeners.rsio]\nport = 5554\n", 0, []),
])
def test_rsio_port_flag(tmp_path: Path, text: str, flag: int | None, rsio: list[Listener]) -> None:
    cfg = _load(tmp_path, text, rsio_port=flag)
    assert [lst for lst in cfg.listeners if lst.protocol == "rsio"] == rsio


def test_rsio_limits_default(tmp_path: Path) -> None:
    """Without a section, as without a loader: the adapter's defaults."""
    assert BrokerConfig().settings_of("rsio", RsioSettings) == RsioSettings(1 << 20, 64 << 10, 4096)
    assert _load(tmp_path, "").settings_of("rsio", RsioSettings) == RsioSettings(1 << 20, 64 << 10, 4096)


def test_rsio_limits_from_the_file(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "[listeners.rsio]\nport = 5554\nmax_element_bytes = 5000\n"
                          "split_bytes = 100\nwindow = 3\n")
    assert cfg.settings_of("rsio", RsioSettings) == RsioSettings(5000, 100, 3)


@pytest.mark.parametrize(("text", "message"), [
    ('[listeners.rsio]\nport = 5554\nhost = "0.0.0.0"\n', "RSIO has no authentication"),
    (TLS + '[listeners.rsio]\nport = 5554\nhost = "0.0.0.0"\ntls = true\n', "loopback only"),
    ("[listeners.rsio]\nport = 5554\nmax_element_bytes = 16777217\n", "max_element_bytes must be"),
    ("[listeners.rsio]\nport = 5554\nsplit_bytes = 2000000\n", "split_bytes must be"),
    ("[listeners.rsio]\nport = 5554\nwindow = 0\n", "window must be an integer >= 1"),
])
def test_bad_rsio_settings_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text)


def test_rsio_over_tls_with_client_certificates_may_listen_anywhere(tmp_path: Path) -> None:
    text = (TLS + 'cafile = "ca.pem"\nverify_peer = true\n'
            + '[listeners.rsio]\nport = 5554\nhost = "0.0.0.0"\ntls = true\n')
    assert Listener("rsio", "0.0.0.0", 5554, tls=True) in _load(tmp_path, text).listeners
