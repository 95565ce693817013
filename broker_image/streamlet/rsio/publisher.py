"""The publisher string of a subscribe (docs/protocols/reactive-streams.md): which stream, from
where, until when, read or append. Pure: text in, a ``PublisherSpec`` out, or ``BadPublisher``.

    <stream, percent-encoded>[?<key>=<value>&...]     (values form-encoded)
    offset        first (default) | last | next | <offset> | @<ms since the epoch>
    end           never (default) | now | <offset>: complete before this offset
    element_size  0 (default) | 1..65535: every message has this many bytes (packed delivery)
    mode          read (default) | append: the broker subscribes back and appends what it gets
    create        false (default) | true: with mode=append, create the stream if missing
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote

MAX_ELEMENT_SIZE = 65_535
_KEYS = ("offset", "end", "element_size", "mode", "create")


class BadPublisher(ValueError):
    """A publisher string this broker cannot serve; the message says why (sent in onError)."""


@dataclass(frozen=True, slots=True)
class PublisherSpec:
    stream: str
    #: where reading starts: ("first"|"last"|"next", 0), ("offset", n), ("timestamp", ms)
    start: tuple[str, int] = ("first", 0)
    #: None: never complete (follow the stream); "now": at the end committed when subscribed;
    #: an int: once every offset below it was delivered
    end: None | str | int = None
    element_size: int = 0
    append: bool = False
    create: bool = False


def _count(value: str, key: str) -> int:
    if not value.isdigit() or not value.isascii():
        raise BadPublisher(f"{key}={value!r}: not a non-negative decimal integer")
    n = int(value)
    if n >= 1 << 64:
        raise BadPublisher(f"{key}={value}: past 64 bits")
    return n


def _flag(value: str, key: str) -> bool:
    if value not in ("true", "false"):
        raise BadPublisher(f"{key}={value!r}: true or false")
    return value == "true"


def parse(text: str) -> PublisherSpec:
    name, _, query = text.partition("?")
    try:
        stream = unquote(name, errors="strict") if "%" in name else name
    except UnicodeDecodeError:
        raise BadPublisher("the stream name is not percent-encoded UTF-8") from None
    if not stream:
        raise BadPublisher("no stream named")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except (ValueError, UnicodeDecodeError) as e:
        raise BadPublisher(f"options are not key=value pairs: {e}") from None
    seen = set()
    spec: dict[str, object] = {}
    for key, value in pairs:
        if key not in _KEYS:
            raise BadPublisher(f"unknown option {key!r} (known: {', '.join(_KEYS)})")
        if key in seen:
            raise BadPublisher(f"option {key!r} given twice")
        seen.add(key)
        if key == "offset":
            if value in ("first", "last", "next"):
                spec["start"] = (value, 0)
            elif value.startswith("@"):
                spec["start"] = ("timestamp", _count(value[1:], key))
            else:
                spec["start"] = ("offset", _count(value, key))
        elif key == "end":
            spec["end"] = None if value == "never" else "now" if value == "now" else _count(value, key)
        elif key == "element_size":
            size = _count(value, key)
            if size > MAX_ELEMENT_SIZE:
                raise BadPublisher(f"element_size={size}: at most {MAX_ELEMENT_SIZE}")
            spec["element_size"] = size
        elif key == "mode":
            if value not in ("read", "append"):
                raise BadPublisher(f"mode={value!r}: read or append")
            spec["append"] = value == "append"
        else:
            spec["create"] = _flag(value, key)
    out = PublisherSpec(stream, **spec)  # type: ignore[arg-type]
    if out.append and ({"offset", "end"} & seen):
        raise BadPublisher("offset and end are options of mode=read")
    if out.create and not out.append:
        raise BadPublisher("create is an option of mode=append")
    return out


def format_publisher(stream: str, **options: object) -> str:
    """The publisher string for ``stream`` with ``options`` (None values left out): what a
    client sends. ``offset``/``end`` take ints (offsets) or the words above."""
    parts = [f"{k}={quote(str(v).lower() if isinstance(v, bool) else str(v), safe='@')}"
             for k, v in options.items() if v is not None]
    name = quote(stream, safe="")
    return f"{name}?{'&'.join(parts)}" if parts else name
