"""[listeners.mega]'s own keys (docs/configuration.md): the longest topic and PRODUCE payload
a connection takes; longer ones are answered MESSAGE_TOO_LARGE and the connection closed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...mega.codec import DEFAULT_MAX_PAYLOAD, DEFAULT_MAX_TOPIC
from ..config.model import ConfigError
from ..config.values import int_key

if TYPE_CHECKING:
    from ..config.model import BrokerConfig


@dataclass(frozen=True)
class MegaSettings:
    max_topic_bytes: int = DEFAULT_MAX_TOPIC
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> MegaSettings:
        topic = int_key(table, "max_topic_bytes", where, 1)
        payload = int_key(table, "max_payload_bytes", where, 1)
        return cls(DEFAULT_MAX_TOPIC if topic is None else topic,
                   DEFAULT_MAX_PAYLOAD if payload is None else payload)

    def check(self, cfg: BrokerConfig) -> None:
        if not 0 < self.max_payload_bytes <= cfg.frame_limit:
            raise ConfigError(f"listeners.mega.max_payload_bytes must be in 1..server.frame_limit "
                              f"({cfg.frame_limit}), got {self.max_payload_bytes}")
        if not 0 < self.max_topic_bytes <= 255:
            raise ConfigError(f"listeners.mega.max_topic_bytes must be in 1..255 (a stream name's "
                              f"bytes), got {self.max_topic_bytes}")
