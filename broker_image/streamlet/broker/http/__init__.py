"""The broker's small HTTP/1.x server, shared by /metrics (metrics/http.py) and the management
API (mgmt/): parsing and rendering are pure (messages.py), the socket side is server.py."""

from .messages import Request, Response, parse_head, render
from .server import HttpServer

__all__ = ["HttpServer", "Request", "Response", "parse_head", "render"]
