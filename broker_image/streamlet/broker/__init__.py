"""The asyncio broker: connections, streams, subscriptions, authentication."""

from .config import BrokerConfig, ConfigError, load
from .main import LISTENERS, run, serve
from .server import Broker

__all__ = ["LISTENERS", "Broker", "BrokerConfig", "ConfigError", "load", "run", "serve"]
