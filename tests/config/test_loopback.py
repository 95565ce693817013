"""The loopback rule of the unauthenticated listeners (MEGA, RSIO, SBP) judges a host by its
addresses, not by how it is spelt: a literal address must be a loopback one, a name must
resolve, and to loopback addresses only."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from streamlet.broker.config import environment
from streamlet.broker.config.environment import is_loopback_host
from streamlet.broker.config.model import ConfigError, Listener
from streamlet.broker.protocols import load

#: what the fake resolver answers, by name (absent: the name does not resolve)
NAMES: dict[str, list[str]] = {
    "localhost": ["127.0.0.1", "::1"],
    "loop.example": ["127.0.0.53"],
    "127.attacker.example": ["203.0.113.7"],
    "half.example": ["127.0.0.1", "192.0.2.1"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "linklocal.example": ["fe80::1%lo"],
    "empty.example": [],
}


def resolve(host: str, port: Any, family: int = 0, kind: int = 0) -> list[tuple[Any, ...]]:
    if host not in NAMES:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [(socket.AF_INET6 if ":" in a else socket.AF_INET, kind, 6, "", (a, 0))
            for a in NAMES[host]]


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True),
    ("127.255.255.254", True),
    ("::1", True),
    ("::ffff:127.0.0.1", True),          # IPv4-mapped loopback
    ("0.0.0.0", False),
    ("::", False),
    ("", False),                          # every interface
    ("192.0.2.1", False),
    ("::ffff:192.0.2.1", False),
    ("fe80::1%lo", False),
    ("localhost", True),                  # resolves to 127.0.0.1 and ::1 only
    ("loop.example", True),
    ("127.attacker.example", False),      # the prefix that passed before: a public address
    ("half.example", False),              # one address of two is not loopback
    ("mapped.example", True),
    ("linklocal.example", False),
    ("empty.example", False),             # resolves to nothing
    ("nowhere.example", False),           # does not resolve
    ("127.0.0.1.nip.example", False),     # a literal prefix in a name that does not resolve
])
def test_loopback_by_address(host: str, loopback: bool) -> None:
    assert is_loopback_host(host, resolve) is loopback


def test_localhost_resolves_to_loopback_here() -> None:
    """The real resolver: localhost is loopback on any sane machine."""
    assert is_loopback_host("localhost")


@pytest.mark.parametrize("host", ["127.attacker.example", "half.example", "nowhere.example"])
def test_a_name_that_is_not_loopback_is_refused_at_load(tmp_path: Path, host: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment.socket, "getaddrinfo", resolve)
    path = tmp_path / "c.toml"
    path.write_text(f'[listeners.mega]\nport = 5560\nhost = "{host}"\n')
    with pytest.raises(ConfigError, match=r"\[listeners\.mega\] host .*loopback only"):
        load(path, data_dir=str(tmp_path / "data"))


def test_a_name_that_is_loopback_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment.socket, "getaddrinfo", resolve)
    path = tmp_path / "c.toml"
    path.write_text('[listeners.sbp]\nport = 5560\nhost = "loop.example"\n')
    cfg = load(path, data_dir=str(tmp_path / "data"))
    assert Listener("sbp", "loop.example", 5560) in cfg.listeners
