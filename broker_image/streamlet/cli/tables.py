"""The list commands' rows and tables: which fields of the management API's JSON each command
shows, and a plain aligned table. Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .words import size

Item = dict[str, Any]
Column = tuple[str, Callable[[Item], object]]


def _get(item: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        item = item.get(key) if isinstance(item, dict) else None
    return item


def field(dotted: str) -> Callable[[Item], object]:
    return lambda item: _get(item, dotted)


def _client(item: Item) -> object:
    props = item.get("client_properties") or {}
    return props.get("connection_name") or props.get("product") or ""


def _size(item: Item) -> object:
    n = item.get("size_bytes")
    return size(n) if isinstance(n, int) else ""


COLUMNS: dict[str, list[Column]] = {
    "connections": [("name", field("name")), ("user", field("user")), ("vhost", field("vhost")),
                    ("protocol", field("protocol")), ("state", field("state")),
                    ("publishers", field("publishers")), ("consumers", field("consumers")),
                    ("client", _client)],
    "publishers": [("connection", field("connection_details.name")),
                   ("vhost", field("queue.vhost")), ("stream", field("queue.name")),
                   ("id", field("publisher_id")), ("reference", field("reference"))],
    "consumers": [("connection", field("connection_details.name")),
                  ("vhost", field("queue.vhost")), ("stream", field("queue.name")),
                  ("id", field("subscription_id")), ("credits", field("credits")),
                  ("offset", field("offset")), ("lag", field("offset_lag")),
                  ("status", field("activity_status"))],
    "streams": [("vhost", field("vhost")), ("name", field("name")),
                ("messages", field("messages")), ("size", _size),
                ("segments", field("segments")), ("publishers", field("publishers")),
                ("consumers", field("consumers")), ("leader", field("leader"))],
}


def cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(items: list[Item], columns: list[Column]) -> list[str]:
    """A header and one line per item, columns padded to their widest cell."""
    rows = [[name.upper() for name, _ in columns]]
    rows += [[cell(get(item)) for _, get in columns] for item in items]
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]
