"""[listeners.metrics] and serve --metrics-port, read into BrokerConfig.metrics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamlet.broker.config.model import ConfigError, MetricsListener
from streamlet.broker.protocols import load
from streamlet.cli.main import build_parser


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "streamlet.toml"
    path.write_text(text)
    return path


def test_on_by_default_on_15692_and_may_give_way() -> None:
    assert load().metrics == MetricsListener(15692, None, required=False)


def test_the_section(tmp_path: Path) -> None:
    cfg = load(config(tmp_path, '[listeners.metrics]\nport = 9419\nhost = "0.0.0.0"\n'
                                "max_streams = 10\nmax_consumers = 0\n"))
    assert cfg.metrics == MetricsListener(9419, "0.0.0.0", True, 10, 0)
    assert all(lst.protocol != "metrics" for lst in cfg.listeners), "not a stream protocol"


@pytest.mark.parametrize("text", ["[listeners.metrics]\nenabled = false\n",
                                  "[listeners.metrics]\nport = 0\n"])
def test_the_section_turns_it_off(tmp_path: Path, text: str) -> None:
    assert load(config(tmp_path, text)).metrics is None


def test_the_flag_wins(tmp_path: Path) -> None:
    path = config(tmp_path, '[listeners.metrics]\nport = 9419\nhost = "0.0.0.0"\n')
    assert load(path, metrics_port=0).metrics is None
    assert load(path, metrics_port=9000).metrics == MetricsListener(9000, "0.0.0.0", True)
    assert load(metrics_port=9000).metrics == MetricsListener(9000, None, True)


@pytest.mark.parametrize(("text", "message"), [
    ("[listeners.metrics]\nport = 70000\n", "listeners.metrics.port must be in 1..65535"),
    ("[listeners.metrics]\nport = -1\n", "listeners.metrics.port must be an integer >= 0"),
    ("[listeners.metrics]\npath = \"/m\"\n", "unknown key(s) in [listeners.metrics]: path"),
    ("[listeners.metrics]\nmax_streams = \"all\"\n", "listeners.metrics.max_streams must be"),
])
def test_bad_values_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(config(tmp_path, text))


def test_serve_help_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--metrics-port P" in out and "15692" in out
