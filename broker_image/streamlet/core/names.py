"""Stream names: which names a stream may have, and the directory a stream (or a virtual host)
of a given name is kept in. Pure rules, shared by every protocol and the CLI.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote

#: The longest file name Linux file systems take (NAME_MAX), in bytes.
NAME_MAX = 255


def dir_name(name: str) -> str:
    """The directory name for a stream (or virtual host) called ``name``: the name URL-quoted
    (a leading dot too), or, when that is longer than NAME_MAX (a 1-255-byte name can quote to
    765), ``#`` and the SHA-256 of the name in hex: 65 bytes whatever the name. Quoting never
    writes ``#``, so the two forms cannot collide. The real name is in ``stream.json``."""
    encoded = quote(name, safe="")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if len(encoded) <= NAME_MAX:
        return encoded
    return "#" + hashlib.sha256(name.encode()).hexdigest()


def valid_stream_name(name: str) -> str | None:
    """None if ``name`` can be a stream, else why not: the rules RabbitMQ has (kept for every
    protocol, so a stream made through one is reachable through all), plus file safety."""
    raw = name.encode()
    if not name or len(raw) > 255:
        return "a stream name has 1 to 255 bytes"
    if name.startswith("amq."):
        return "names starting with 'amq.' are reserved"
    if any(c in name for c in "\x00\n\r"):
        return "a stream name cannot contain NUL or line breaks"
    return None
