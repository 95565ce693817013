"""Pure decisions of the broker: configuration, Create arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamlet.broker.arguments import parse_create_arguments
from streamlet.broker.config.model import ConfigError, Retention
from streamlet.broker.config.values import parse_duration_ms
from streamlet.broker.protocols import load
from streamlet.core.settings import StreamSettings


def test_durations() -> None:
    assert parse_duration_ms("7D") == 7 * 86400_000
    assert parse_duration_ms("12h") == 12 * 3600_000
    assert parse_duration_ms("30s") == 30_000
    for bad in ("7", "D", "7d", "1.5h", "-1h", "7 D"):
        with pytest.raises(ConfigError):
            parse_duration_ms(bad)


def test_create_arguments() -> None:
    defaults = Retention(max_age_ms=1000, max_length_bytes=None)
    s = parse_create_arguments({"max-length-bytes": "5000", "stream-filter-size-bytes": "32",
                                "initial-cluster-size": "3"}, defaults)
    assert s == StreamSettings(1000, 5000, 500_000_000, 32)
    assert StreamSettings.from_json(s.to_json()) == s
    for bad in ({"max-age": "x"}, {"max-length-bytes": "-1"}, {"stream-max-segment-size-bytes": "4000000000"},
                {"stream-filter-size-bytes": "15"}, {"what": "1"}):
        with pytest.raises(ConfigError):
            parse_create_arguments(bad, defaults)


def test_config_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "b.toml"
    cfg.write_text('[server]\nport = 6000\nadvertised_host = "file-host"\n[storage]\nfsync = "chunk"\n')
    monkeypatch.setenv("STREAMLET_ADVERTISED_HOST", "env-host")
    c = load(cfg, port=7000)
    assert c.port == 7000 and c.fsync == "chunk" and c.advertised == ("env-host", 7000)
    monkeypatch.delenv("STREAMLET_ADVERTISED_HOST")
    assert load(None, host="0.0.0.0").advertised == ("localhost", 5552)
    cfg.write_text("[nonsense]\n")
    with pytest.raises(ConfigError, match="unknown config section"):
        load(cfg)
    cfg.write_text('[storage]\nfsync = "sometimes"\n')
    with pytest.raises(ConfigError, match="fsync"):
        load(cfg)
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.toml")
