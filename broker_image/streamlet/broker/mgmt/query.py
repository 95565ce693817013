"""RabbitMQ's list query parameters: ``sort`` (a dotted key), ``sort_reverse`` and ``columns``
(comma-separated dotted keys), applied to the JSON items. Pure."""

from __future__ import annotations

from typing import Any

Item = dict[str, Any]


def _get(item: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(item, dict):
            return None
        item = item.get(key)
    return item


def _sort_key(value: Any) -> tuple[int, Any]:
    """Missing values first, then numbers, then anything else by its text."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value))


def _columns(item: Item, columns: list[list[str]]) -> Item:
    out: Item = {}
    for path in columns:
        src: Any = item
        dst = out
        for key in path[:-1]:
            src = src.get(key) if isinstance(src, dict) else None
            if not isinstance(src, dict):
                break
            dst = dst.setdefault(key, {})
        else:
            if isinstance(src, dict) and path[-1] in src:
                dst[path[-1]] = src[path[-1]]
    return out


def apply(items: list[Item], query: dict[str, str]) -> list[Item]:
    sort = query.get("sort")
    if sort:
        items = sorted(items, key=lambda i: _sort_key(_get(i, sort)),
                       reverse=query.get("sort_reverse") == "true")
    columns = [c.split(".") for c in query.get("columns", "").split(",") if c]
    if columns:
        items = [_columns(i, columns) for i in items]
    return items
