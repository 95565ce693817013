"""RabbitMQ's Subscribe properties for filtering (``filter.N``, ``match-unfiltered``), read
into the core's bloom Matcher (core/filtering.py)."""

from __future__ import annotations

from ...core.filtering import Matcher

FILTER_PREFIX = "filter."


def matcher_from(properties: dict[str, str]) -> Matcher | None:
    """The matcher for Subscribe properties ``filter.N`` and ``match-unfiltered``; None if the
    subscription does not filter (it then receives every chunk)."""
    values = [v for k, v in sorted(properties.items()) if k.startswith(FILTER_PREFIX) and v]
    if not values:
        return None
    return Matcher(values, properties.get("match-unfiltered", "false").lower() == "true")
