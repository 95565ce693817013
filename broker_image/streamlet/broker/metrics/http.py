"""``GET /metrics`` (and ``/``) over the broker's shared HTTP server (broker/http)."""

from __future__ import annotations

from collections.abc import Callable

from ..http import HttpServer, Request, Response


def metrics_answer(request: Request, render: Callable[[], bytes],
                   content_type: str) -> Response:
    """The endpoint's routing: a pure function of the request (``render`` is called for
    /metrics only)."""
    if request.segments not in (("metrics",), ()):
        return Response(404, b"not found: try /metrics\n")
    if request.method not in ("GET", "HEAD"):
        return Response(405, b"GET or HEAD only\n", headers=(("Allow", "GET, HEAD"),))
    if not request.segments:
        return Response(200, b"streamlet: Prometheus metrics at /metrics\n")
    return Response(200, render(), content_type)


class MetricsServer(HttpServer):
    """Serves ``render()`` (bytes, ``content_type``) at ``/metrics`` on ``host``:``port``."""

    def __init__(self, render: Callable[[], bytes], content_type: str) -> None:
        super().__init__(lambda request: metrics_answer(request, render, content_type),
                         "metrics")
