"""The protocols a broker speaks, one row each: its name, its connection factory, its settings
(the own keys of its [listeners.<name>] section, a class beside its adapter), its usual port
and whether it authenticates its clients. A further protocol is one adapter package and one
row here; ``load`` reads a config file with every row's section, ``LISTENERS`` gives the
Broker every row's connections."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config.model import DEFAULT_PORT, BrokerConfig, ProtocolSettings
from .config.reading import read
from .mega.connection import MegaConnection
from .mega.settings import MegaSettings
from .rabbitmq.connection import Connection
from .rsio.connection import RsioConnection
from .rsio.settings import RsioSettings
from .sbp.connection import SbpConnection
from .sbp.settings import SbpSettings
from .server import ConnectionFactory


@dataclass(frozen=True)
class ProtocolRow:
    """One protocol. ``settings``: the class its [listeners.<name>] section is read into (None:
    RabbitMQ's, whose listener [server] places); ``default_port``: the one its clients try
    first (the CLI's --protocol default, docs/configuration.md's sample); ``authenticated``
    False: its listeners are loopback-only (or TLS with client certificates) and budgeted."""

    name: str
    connection: ConnectionFactory
    settings: type[ProtocolSettings] | None
    default_port: int
    authenticated: bool = False


PROTOCOLS: tuple[ProtocolRow, ...] = (
    ProtocolRow("rabbitmq", lambda broker, tls: Connection(broker, tls=tls), None, DEFAULT_PORT,
                authenticated=True),
    ProtocolRow("mega", lambda broker, tls: MegaConnection(broker, tls=tls), MegaSettings, 5553),
    ProtocolRow("rsio", lambda broker, tls: RsioConnection(broker, tls=tls), RsioSettings, 5554),
    ProtocolRow("sbp", lambda broker, tls: SbpConnection(broker, tls=tls), SbpSettings, 5555),
)

#: the connection factory of each protocol, by name: what the Broker listens with
LISTENERS: Mapping[str, ConnectionFactory] = {p.name: p.connection for p in PROTOCOLS}


def load(path: Path | None = None, **flags: Any) -> BrokerConfig:
    """The config of a broker speaking PROTOCOLS (config/reading.py's ``read``): ``flags`` as
    serve's, ``<name>_port`` for each further protocol's --<name>-port."""
    return read(path, PROTOCOLS, **flags)
