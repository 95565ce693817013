"""[listeners.sbp]'s own key (docs/configuration.md): the largest frame taken; a longer one
is answered with GOAWAY and a close."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...sbp.frame import DEFAULT_MAX_FRAME
from ..config.model import ConfigError
from ..config.values import int_key

if TYPE_CHECKING:
    from ..config.model import BrokerConfig


@dataclass(frozen=True)
class SbpSettings:
    max_frame_bytes: int = DEFAULT_MAX_FRAME

    @classmethod
    def parse(cls, table: Mapping[str, Any], where: str) -> SbpSettings:
        frame = int_key(table, "max_frame_bytes", where, 16)
        return cls(DEFAULT_MAX_FRAME if frame is None else frame)

    def check(self, cfg: BrokerConfig) -> None:
        if not 16 <= self.max_frame_bytes <= cfg.frame_limit:
            raise ConfigError(f"listeners.sbp.max_frame_bytes must be in 16..server.frame_limit "
                              f"({cfg.frame_limit}), got {self.max_frame_bytes}")
