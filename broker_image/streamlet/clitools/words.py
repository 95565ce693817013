"""Counts in words for the CLI's summaries: "1 message", "2 messages". Pure."""

from __future__ import annotations


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one (``many``: when not one + "s")."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def messages(n: int) -> str:
    return plural(n, "message")
