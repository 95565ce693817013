"""The asyncio broker: connections, streams, subscriptions, authentication."""

from .config import BrokerConfig, ConfigError, load
from .server import Broker, run, serve

__all__ = ["Broker", "BrokerConfig", "ConfigError", "load", "run", "serve"]
