"""[listeners.rsio]'s own keys (docs/configuration.md): the largest element taken, the size
past which elements are sent in parts, and the demand an append starts with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...rsio.codec import DEFAULT_MAX_ELEMENT
from ..config.model import ConfigError
from ..config.values import int_key

if TYPE_CHECKING:
    from ..config.model import BrokerConfig

DEFAULT_SPLIT = 64 << 10
DEFAULT_WINDOW = 4096


@dataclass(frozen=True)
class RsioSettings:
    max_element_bytes: int = DEFAULT_MAX_ELEMENT
    split_bytes: int = DEFAULT_SPLIT
    window: int = DEFAULT_WINDOW

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> RsioSettings:
        element = int_key(table, "max_element_bytes", where, 1)
        split = int_key(table, "split_bytes", where, 1)
        window = int_key(table, "window", where, 1)
        return cls(DEFAULT_MAX_ELEMENT if element is None else element,
                   DEFAULT_SPLIT if split is None else split,
                   DEFAULT_WINDOW if window is None else window)

    def check(self, cfg: BrokerConfig) -> None:
        if not 0 < self.max_element_bytes <= cfg.frame_limit:
            raise ConfigError(f"listeners.rsio.max_element_bytes must be in 1..server.frame_limit "
                              f"({cfg.frame_limit}), got {self.max_element_bytes}")
        if not 0 < self.split_bytes <= self.max_element_bytes:
            raise ConfigError(f"listeners.rsio.split_bytes must be in 1..max_element_bytes, "
                              f"got {self.split_bytes}")
