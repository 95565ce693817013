"""Which page a request names: the management API's path table, as RabbitMQ's endpoints that
stream users touch. Pure: a method and path segments in, a route (or why not) out."""

from __future__ import annotations

from dataclasses import dataclass

#: (path pattern, the methods it takes -> the page's name); "{x}" is one path segment
TABLE: tuple[tuple[tuple[str, ...], dict[str, str]], ...] = (
    (("api", "overview"), {"GET": "overview"}),
    (("api", "whoami"), {"GET": "whoami"}),
    (("api", "vhosts"), {"GET": "vhosts"}),
    (("api", "vhosts", "{vhost}"), {"GET": "vhost"}),
    (("api", "vhosts", "{vhost}", "connections"), {"GET": "connections"}),
    (("api", "connections"), {"GET": "connections"}),
    (("api", "connections", "{name}"), {"GET": "connection", "DELETE": "close"}),
    (("api", "stream", "connections"), {"GET": "stream_connections"}),
    (("api", "stream", "connections", "{vhost}"), {"GET": "stream_connections"}),
    (("api", "queues"), {"GET": "queues"}),
    (("api", "queues", "{vhost}"), {"GET": "queues"}),
    (("api", "queues", "{vhost}", "{name}"), {"GET": "queue", "PUT": "declare",
                                              "DELETE": "delete"}),
    (("api", "stream", "publishers"), {"GET": "publishers"}),
    (("api", "stream", "publishers", "{vhost}"), {"GET": "publishers"}),
    (("api", "stream", "publishers", "{vhost}", "{stream}"), {"GET": "publishers"}),
    (("api", "stream", "consumers"), {"GET": "consumers"}),
    (("api", "stream", "consumers", "{vhost}"), {"GET": "consumers"}),
    (("api", "stream", "consumers", "{vhost}", "{stream}"), {"GET": "consumers"}),
    (("api", "policies"), {"GET": "policies"}),
    (("api", "policies", "{vhost}"), {"GET": "policies"}),
    (("api", "policies", "{vhost}", "{name}"), {"GET": "policy", "PUT": "set_policy",
                                                "DELETE": "delete_policy"}),
)


@dataclass(frozen=True)
class Route:
    page: str
    params: dict[str, str]


@dataclass(frozen=True)
class NoRoute:
    """404 (no such path) or 405 (the path, not that method: ``allow`` lists what it takes)."""

    status: int
    allow: tuple[str, ...] = ()


def _match(pattern: tuple[str, ...], segments: tuple[str, ...]) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    params: dict[str, str] = {}
    for want, got in zip(pattern, segments, strict=True):
        if want.startswith("{"):
            params[want[1:-1]] = got
        elif want != got:
            return None
    return params


def route(method: str, segments: tuple[str, ...]) -> Route | NoRoute:
    """HEAD is GET without the body, as HTTP has it."""
    for pattern, methods in TABLE:
        params = _match(pattern, segments)
        if params is None:
            continue
        page = methods.get("GET" if method == "HEAD" else method)
        if page is None:
            allow = tuple(sorted({*methods, "HEAD"} if "GET" in methods else methods))
            return NoRoute(405, allow)
        return Route(page, params)
    return NoRoute(404)
