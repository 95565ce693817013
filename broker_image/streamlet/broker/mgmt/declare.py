"""A queue declared through the management API (PUT /api/queues/{vhost}/{name}, as rabbitmqadmin
`declare queue name=S queue_type=stream` and RabbitMQ's UI send it): a stream, when its
arguments say x-queue-type=stream; anything else is answered 400 with the reason, as RabbitMQ
answers a declaration it refuses (streamlet holds streams only: no classic or quorum queue).

Pure: the request body in, the stream protocol's Create arguments out (``x-max-age`` ->
``max-age``, values as text), or the refusal. Whether an existing stream is the same one is
:func:`inequivalent`'s answer, naming the argument as RabbitMQ does ("inequivalent arg")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: the queue arguments a stream takes, as the stream protocol's Create names them (the same
#: without "x-"), and the field of its settings each sets (None: not kept in the settings)
ARGUMENTS: dict[str, str | None] = {
    "x-max-age": "max_age_ms", "x-max-length-bytes": "max_length_bytes",
    "x-stream-max-segment-size-bytes": "max_segment_size_bytes",
    "x-stream-filter-size-bytes": "filter_size",
    "x-initial-cluster-size": None, "x-queue-leader-locator": None,
}
STREAM_ONLY = ("streamlet holds streams only: declare it with the argument "
               "x-queue-type=stream (rabbitmqadmin: queue_type=stream)")


@dataclass(frozen=True)
class Refusal:
    """The 400 answer's reason."""

    reason: str


def _flag(value: Any, default: bool) -> bool | None:
    """A boolean property as JSON or as rabbitmqadmin's text ("true"); None when neither."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _text(value: Any) -> str | None:
    """An argument's value as Create takes it (text); None for what has no text form."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return None


def declaration(body: bytes, name: str) -> dict[str, str] | Refusal:
    """The Create arguments of a declared queue that is a stream, or why it is refused."""
    try:
        doc = json.loads(body or b"{}")
    except (UnicodeDecodeError, ValueError):
        return Refusal("the body is not JSON")
    if not isinstance(doc, dict):
        return Refusal("the body is not a JSON object")
    arguments = doc.get("arguments") or {}
    if not isinstance(arguments, dict):
        return Refusal("arguments is not a JSON object")
    if arguments.get("x-queue-type", doc.get("queue_type")) != "stream":
        return Refusal(STREAM_ONLY)
    for prop, default, wanted in (("durable", True, True), ("auto_delete", False, False),
                                  ("exclusive", False, False)):
        value = _flag(doc.get(prop), default)
        if value is None:
            return Refusal(f"{prop} must be true or false")
        if value != wanted:
            return Refusal(f"invalid property '{prop}' for queue '{name}': a stream is "
                           f"{'durable' if wanted else f'never {prop}'}")
    out: dict[str, str] = {}
    for key, value in arguments.items():
        if key == "x-queue-type":
            continue
        if key not in ARGUMENTS:
            return Refusal(f"a stream takes no argument {key!r} (it takes "
                           f"{', '.join(ARGUMENTS)})")
        text = _text(value)
        if text is None:
            return Refusal(f"argument {key!r}: {json.dumps(value)} is not a number or text")
        out[key[2:]] = text
    return out


def inequivalent(arguments: dict[str, str], asked: object, current: object, name: str,
                 vhost: str) -> str | None:
    """Why an existing stream is not what was declared: the first argument given whose setting
    differs (those not given are not compared: the broker's defaults may have changed since the
    stream was made); None when it is the same."""
    for key, field in ARGUMENTS.items():
        if field is None or key[2:] not in arguments:
            continue
        if getattr(asked, field) != getattr(current, field):
            return (f"inequivalent arg '{key}' for queue '{name}' in vhost '{vhost}': received "
                    f"'{arguments[key[2:]]}', but the stream has {field} "
                    f"{getattr(current, field)}")
    return None
