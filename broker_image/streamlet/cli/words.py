"""Counts and sizes in words for the CLI: "1 message", "2 messages"; sizes in one unit family,
binary (B, KiB, MiB, GiB, TiB, as RabbitMQ's management UI shows them), wherever a command
shows a size. Pure."""

from __future__ import annotations


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one (``many``: when not one + "s")."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def messages(n: int) -> str:
    return plural(n, "message")


def size(n: int) -> str:
    """``n`` bytes: "512 B", "1.5 KiB", "3.0 MiB" (one decimal from KiB on)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
