"""Create arguments of the protocol, validated into a stream's settings (pure functions)."""

from __future__ import annotations

from ..core.names import valid_stream_name as valid_stream_name  # a core rule, for the adapter
from ..core.settings import StreamSettings
from ..replication.placement import Locator
from .config.model import MAX_SEGMENT_BYTES, ConfigError, Retention
from .config.values import parse_duration_ms

#: Arguments about where a stream's members go (``replication_request``), not its settings.
PLACEMENT = {"initial-cluster-size", "queue-leader-locator"}
#: Arguments RabbitMQ accepts that mean nothing here; accepted and ignored.
IGNORED = {"x-queue-type", *PLACEMENT}


def _positive_int(key: str, value: str, lo: int, hi: int | None = None) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"argument {key} must be an integer, got {value!r}") from None
    if n < lo or (hi is not None and n > hi):
        bound = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        raise ConfigError(f"argument {key} must be {bound}, got {n}")
    return n


def parse_create_arguments(args: dict[str, str], defaults: Retention) -> StreamSettings:
    """Turn Create arguments into settings; raise ConfigError (-> precondition failed)."""
    max_age = defaults.max_age_ms
    max_len = defaults.max_length_bytes
    segment = defaults.max_segment_size_bytes
    filter_size = 16
    for key, value in args.items():
        if key == "max-age":
            max_age = parse_duration_ms(value) or None
        elif key == "max-length-bytes":
            max_len = _positive_int(key, value, 0) or None
        elif key == "stream-max-segment-size-bytes":
            segment = _positive_int(key, value, 1, MAX_SEGMENT_BYTES)
        elif key == "stream-filter-size-bytes":
            filter_size = _positive_int(key, value, 16, 255)
        elif key not in IGNORED:
            raise ConfigError(f"unknown stream argument {key!r}")
    return StreamSettings(max_age, max_len, segment, filter_size)


def create_arguments(settings: StreamSettings) -> dict[str, str]:
    """The Create arguments that give a stream ``settings`` whatever a broker's defaults are
    (how a leader makes a new member's copy: ``parse_create_arguments`` reads them back)."""
    age = settings.max_age_ms or 0
    return {"max-age": f"{-(-age // 1000)}s",
            "max-length-bytes": str(settings.max_length_bytes or 0),
            "stream-max-segment-size-bytes": str(settings.max_segment_size_bytes),
            "stream-filter-size-bytes": str(settings.filter_size)}


def replication_request(args: dict[str, str]) -> tuple[int, Locator]:
    """How many members a Create asks for (``initial-cluster-size``, 1 when absent) and where
    its leader goes (``queue-leader-locator``); raise ConfigError (-> precondition failed)."""
    size = 1
    if "initial-cluster-size" in args:
        size = _positive_int("initial-cluster-size", args["initial-cluster-size"], 1)
    try:
        return size, Locator.parse(args.get("queue-leader-locator"))
    except ValueError as e:
        raise ConfigError(str(e)) from None
