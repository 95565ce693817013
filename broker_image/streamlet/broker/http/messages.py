"""HTTP/1.x requests and responses as values: a request head parsed, a response rendered.
Pure (no socket), so the edge cases are tested with tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
           403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
           413: "Payload Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Request:
    method: str
    #: the path's segments, each percent-decoded after the split, so that an encoded "/"
    #: (%2F, the vhost "/") stays inside its segment: "/api/queues/%2F/s" -> ("api", "queues", "/", "s")
    segments: tuple[str, ...]
    query: dict[str, str] = field(default_factory=dict)
    #: header names in lower case
    headers: dict[str, str] = field(default_factory=dict)
    #: the client's address (set by the server: loopback-only users are checked against it)
    peer: str | None = None
    #: the request's body, as read by the server (PUT /api/queues/{vhost}/{name} takes one)
    body: bytes = b""

    @property
    def path(self) -> str:
        return "/" + "/".join(self.segments)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


def split_path(raw: str) -> tuple[str, ...]:
    """"/a//b/" -> ("a", "b"): empty segments dropped (a trailing slash is the same path)."""
    return tuple(unquote(s) for s in raw.split("/") if s)


def parse_head(head: bytes) -> Request | None:
    """The request line and headers up to the blank line; None if it is not HTTP/1.x."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        return None
    method, target = parts[0], parts[1]
    raw_path, _, raw_query = target.partition("?")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    return Request(method, split_path(raw_path), dict(parse_qsl(raw_query)), headers)


def body_length(request: Request, limit: int) -> int | Response:
    """The request body's length (0: none), or the answer that refuses it: 400 for a
    Content-Length that is not a number, 411 for a body without one (chunked: the server does
    not read those), 413 past ``limit`` bytes."""
    if "transfer-encoding" in request.headers:
        return Response(411, b"a request body needs a Content-Length\n")
    text = request.headers.get("content-length", "0").strip()
    if not text.isdigit():
        return Response(400, b"bad Content-Length\n")
    size = int(text)
    if size > limit:
        return Response(413, f"a request body may have at most {limit} bytes\n".encode())
    return size


def render(response: Response, head_only: bool = False) -> bytes:
    """The whole answer, always ``Connection: close`` (one request per connection)."""
    status = response.status
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}",
             f"Content-Type: {response.content_type}",
             f"Content-Length: {len(response.body)}",
             "Cache-Control: no-cache", "Connection: close",
             *(f"{k}: {v}" for k, v in response.headers)]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body
