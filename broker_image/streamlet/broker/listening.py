"""A listener that cannot listen, said alike for every listener of the broker (the stream ports
and the HTTP ones): the serve command prints ``cannot serve on <filename>: <strerror>``."""

from __future__ import annotations

import os


def reason(e: OSError) -> str:
    """Why, without asyncio's wording of the address (the caller names it)."""
    return os.strerror(e.errno) if e.errno else str(e)


def listen_error(e: OSError, what: str, host: str, port: int) -> OSError:
    """``e``, raised listening on ``host``:``port`` for ``what``, with the address as its
    ``filename`` and ``what`` after the reason."""
    return OSError(e.errno, f"{reason(e)} ({what})", f"{host}:{port}")
