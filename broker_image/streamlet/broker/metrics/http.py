"""``GET /metrics`` (and ``/``) over the broker's shared HTTP server (broker/http), and
``GET /ready``: 200 when the broker is ready for traffic, else 503 with the reasons (its pod's
readinessProbe; streamlet.replication.readiness has the rule)."""

from __future__ import annotations

from collections.abc import Callable

from ...replication.readiness import Readiness
from ..http import HttpServer, Request, Response


def _always_ready() -> Readiness:
    return Readiness(True)


def metrics_answer(request: Request, render: Callable[[], bytes], content_type: str,
                   ready: Callable[[], Readiness] = _always_ready) -> Response:
    """The endpoint's routing: a pure function of the request (``render`` is called for
    /metrics only, ``ready`` for /ready only)."""
    if request.segments not in (("metrics",), ("ready",), ()):
        return Response(404, b"not found: try /metrics or /ready\n")
    if request.method not in ("GET", "HEAD"):
        return Response(405, b"GET or HEAD only\n", headers=(("Allow", "GET, HEAD"),))
    if not request.segments:
        return Response(200, b"streamlet: Prometheus metrics at /metrics, readiness at /ready\n")
    if request.segments == ("ready",):
        answer = ready()
        return Response(200 if answer.ready else 503, answer.text().encode())
    return Response(200, render(), content_type)


class MetricsServer(HttpServer):
    """Serves ``render()`` (bytes, ``content_type``) at ``/metrics`` and ``ready()`` at
    ``/ready`` on ``host``:``port``."""

    def __init__(self, render: Callable[[], bytes], content_type: str,
                 ready: Callable[[], Readiness] = _always_ready) -> None:
        super().__init__(lambda request: metrics_answer(request, render, content_type, ready),
                         "metrics")
