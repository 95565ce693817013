"""What the machine a broker runs on adds to its config file: the environment's variables
(STREAMLET_ADVERTISED_HOST, STREAMLET_ADVERTISED_PORT, STREAMLET_MEMBER), the member id a
StatefulSet pod's hostname gives, the file's relative paths made absolute against its folder,
and whether a host is this machine's loopback (by resolving it)."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .model import ConfigError

MAX_MEMBER = 0xFFFE
#: The member id "auto" stands for: the digits after the last '-' of the hostname's first label.
AUTO_MEMBER = "auto"
_ORDINAL = re.compile(r"-(\d+)$")


def member_from_hostname(hostname: str) -> int:
    """A StatefulSet pod's ordinal from its hostname, ``<name>-<ordinal>`` (only the first DNS
    label counts, so a pod with ``setHostnameAsFQDN`` works too)."""
    label = hostname.split(".", 1)[0]
    m = _ORDINAL.search(label)
    if not m:
        raise ConfigError(f'cluster.member = "{AUTO_MEMBER}": hostname {hostname!r} does not end '
                          f"in -<ordinal> as a StatefulSet pod's <name>-<ordinal> does; set "
                          "cluster.member to this broker's member id")
    return member(int(m.group(1)), f"cluster.member (from hostname {hostname!r})")


def member(value: Any, where: str = "cluster.member") -> int:
    """An explicit member id, or "auto" (from the hostname)."""
    if value == AUTO_MEMBER:
        return member_from_hostname(socket.gethostname())
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_MEMBER:
        raise ConfigError(f'{where} must be an integer in 0..{MAX_MEMBER} or "{AUTO_MEMBER}", '
                          f"got {value!r}")
    return value


#: the file paths a config file names, by section: a relative one is relative to the file's
#: folder (not to the directory the broker was started from)
PATH_KEYS = {"server": ("data_dir", "users_file"), "cluster": ("directory_file",),
             "tls": ("certfile", "keyfile", "cafile")}


def absolute_paths(doc: dict[str, Any], base: Path) -> dict[str, Any]:
    """``doc`` with its relative PATH_KEYS made absolute against ``base`` (the file's folder)."""
    out = dict(doc)
    for section, keys in PATH_KEYS.items():
        table = out.get(section)
        if not isinstance(table, dict):
            continue
        table = out[section] = dict(table)
        for key in keys:
            value = table.get(key)
            if isinstance(value, str) and value and not Path(value).is_absolute():
                table[key] = str(base.resolve() / value)
    return out


def loopback_address(address: str) -> bool:
    """A literal IPv4 or IPv6 address of the loopback (an IPv4-mapped one too); False for
    anything else, a name included."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # fe80::1%lo: the zone is no part
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


Resolver = Callable[..., list[tuple[Any, ...]]]


def is_loopback_host(host: str, resolve: Resolver | None = None) -> bool:
    """Whether a listener on ``host`` is reachable from this machine only: a literal address
    must be a loopback one; a name must resolve (``resolve``, getaddrinfo's signature; None:
    socket.getaddrinfo), and to loopback addresses only, every one of them. A name that does
    not resolve, or resolves to any other address too, is not (so ``127.attacker.example`` is
    judged by where it points, not by how it is spelt)."""
    if not host:
        return False  # every interface
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    else:
        return loopback_address(host)
    try:
        infos = (resolve or socket.getaddrinfo)(host, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # socket.gaierror is an OSError
        return False
    addresses = {str(info[4][0]) for info in infos}
    return bool(addresses) and all(loopback_address(a) for a in addresses)


def from_environment() -> dict[str, Any]:
    """The BrokerConfig fields the environment sets: the advertised address, the member id."""
    env: dict[str, Any] = {}
    if os.environ.get("STREAMLET_ADVERTISED_HOST"):
        env["advertised_host"] = os.environ["STREAMLET_ADVERTISED_HOST"]
    if os.environ.get("STREAMLET_ADVERTISED_PORT"):
        text = os.environ["STREAMLET_ADVERTISED_PORT"].strip()
        if not text.isdigit() or not 0 < int(text) < 65536:
            raise ConfigError(f"STREAMLET_ADVERTISED_PORT must be a port (1..65535), got {text!r}")
        env["advertised_port"] = int(text)
    if os.environ.get("STREAMLET_MEMBER"):
        env["member"] = member(os.environ["STREAMLET_MEMBER"], "STREAMLET_MEMBER")
    return env
