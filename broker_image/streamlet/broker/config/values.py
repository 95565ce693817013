"""One value of a config file read and checked: integers, durations, peer addresses, the
reload interval. Each raises ConfigError naming the key and what it takes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .model import ConfigError

_DURATION = re.compile(r"^(\d+)([YMDhms])$")
_UNIT_MS = {"Y": 365 * 86400_000, "M": 30 * 86400_000, "D": 86400_000, "h": 3600_000,
            "m": 60_000, "s": 1000}


def parse_duration_ms(text: str) -> int:
    """RabbitMQ's max-age syntax: a number and one unit of Y M D h m s, e.g. ``7D``."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ConfigError(f"bad duration {text!r}: expected a number and one of Y M D h m s, e.g. 7D")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def peers(value: Any) -> tuple[tuple[str, int], ...]:
    """cluster.peers: a list of 'host:port' strings ('[::1]:5552' for IPv6)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"cluster.peers must be a list of 'host:port' strings, got {value!r}")
    out = []
    for v in value:
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"cluster.peers: expected 'host:port', got {v!r}")
        out.append((host.strip("[]"), int(port)))
    return tuple(out)


def reload_interval(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 86400:
        raise ConfigError("server.reload_interval must be a number of seconds in 0..86400 "
                          f"(0: reload on SIGHUP only), got {value!r}")
    return float(value)


def int_key(section: Mapping[str, Any], key: str, where: str, minimum: int = 0) -> int | None:
    """``section[key]``, an integer of at least ``minimum`` (None: not there); ``where``
    names the section in the message, e.g. ``listeners.mega``."""
    if key not in section:
        return None
    v = section[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ConfigError(f"{where}.{key} must be an integer >= {minimum}, got {v!r}")
    return v
