"""The asyncio broker: connections, streams, subscriptions, authentication."""

from .config.model import BrokerConfig, ConfigError
from .main import run, serve
from .protocols import LISTENERS, PROTOCOLS, load
from .server import Broker

__all__ = ["LISTENERS", "PROTOCOLS", "Broker", "BrokerConfig", "ConfigError", "load", "run", "serve"]
