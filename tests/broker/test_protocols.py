"""A protocol is one row of broker/protocols.py: its listener and its [listeners.<name>]
settings come from the row alone (a made-up protocol's row is read as MEGA's is). That the
CLI's lists agree with the rows: tests/cli/test_command_tables.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamlet.broker.config.model import BrokerConfig, ConfigError, Listener
from streamlet.broker.config.reading import read
from streamlet.broker.config.values import int_key
from streamlet.broker.protocols import LISTENERS, PROTOCOLS, ProtocolRow


@dataclass(frozen=True)
class EchoSettings:
    """A further protocol's own keys, as an adapter's settings.py declares them."""

    max_line_bytes: int = 80

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> EchoSettings:
        value = int_key(table, "max_line_bytes", where, 1)
        return cls(80 if value is None else value)

    def check(self, cfg: BrokerConfig) -> None:
        if self.max_line_bytes > cfg.frame_limit:
            raise ConfigError(f"listeners.echo.max_line_bytes must be at most {cfg.frame_limit}")


ECHO = ProtocolRow("echo", LISTENERS["mega"], EchoSettings, 5599)


def _read(tmp_path: Path, text: str, **flags: Any) -> BrokerConfig:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return read(path, (*PROTOCOLS, ECHO), data_dir=str(tmp_path / "data"), **flags)


@pytest.mark.parametrize(("text", "flags", "listeners", "settings"), [
    ("", {}, [], EchoSettings()),
    ("[listeners.echo]\nport = 5600\nmax_line_bytes = 9\n", {}, [Listener("echo", "127.0.0.1", 5600)],
     EchoSettings(9)),
    ("", {"echo_port": 5601}, [Listener("echo", "127.0.0.1", 5601)], EchoSettings()),
    ("[listeners.echo]\nport = 5600\n", {"echo_port": 0}, [], EchoSettings()),
    ("[listeners.echo]\nport = 5600\nenabled = false\nmax_line_bytes = 7\n", {}, [], EchoSettings(7)),
])
def test_a_further_protocol_is_read_from_its_row(tmp_path: Path, text: str, flags: dict[str, Any],
                                                 listeners: list[Listener],
                                                 settings: EchoSettings) -> None:
    cfg = _read(tmp_path, text, **flags)
    assert [lst for lst in cfg.listeners if lst.protocol == "echo"] == listeners
    assert cfg.settings_of("echo", EchoSettings) == settings
    assert cfg.listener_limits("echo").max_connections == 1000  # a tenth of the default 10000


@pytest.mark.parametrize(("text", "message"), [
    ("[listeners.echo]\nport = 5600\nmax_line = 9\n", r"unknown key\(s\) in \[listeners.echo\]: max_line"),
    ("[listeners.echo]\nport = 5600\nmax_line_bytes = 0\n", "listeners.echo.max_line_bytes must be an integer >= 1"),
    ("[server]\nframe_max = 8192\nframe_limit = 8192\n[listeners.echo]\nport = 5600\n"
     "max_line_bytes = 9000\n", "max_line_bytes must be at most 8192"),
    ('[listeners.echo]\nport = 5600\nhost = "0.0.0.0"\n', "ECHO has no authentication"),
])
def test_a_further_protocols_section_is_checked(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _read(tmp_path, text)


def test_settings_are_checked_only_when_the_protocol_listens(tmp_path: Path) -> None:
    cfg = _read(tmp_path, "[server]\nframe_max = 8192\nframe_limit = 8192\n"
                          "[listeners.echo]\nport = 5600\nenabled = false\nmax_line_bytes = 9000\n")
    assert cfg.settings_of("echo", EchoSettings).max_line_bytes == 9000

