"""The commands on the management HTTP API: `connections list|close`, `publishers list`,
`consumers list`, `streams list`. Plain HTTP with Basic authentication, as a script written
for RabbitMQ's management API would make it."""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from .tables import COLUMNS, table

TIMEOUT_S = 30.0


class ApiError(Exception):
    """A one-line reason a request failed."""


def path(args: argparse.Namespace) -> str:
    """The endpoint a command lists; a vhost (and a stream) narrow it when given."""
    what = "queues" if args.command == "streams" else args.command
    base = {"connections": "/api/connections", "queues": "/api/queues"}.get(
        what, f"/api/stream/{what}")
    vhost = getattr(args, "vhost_filter", None)
    stream = getattr(args, "stream", None)
    if stream is not None and vhost is None:
        vhost = "/"
    if what == "connections" and vhost is not None:
        return f"/api/vhosts/{quote(vhost, safe='')}/connections"
    if vhost is not None:
        base += f"/{quote(vhost, safe='')}"
        if stream is not None:
            base += f"/{quote(stream, safe='')}"
    return base


def request(args: argparse.Namespace, method: str, target: str) -> Any:
    url = f"http://{args.host}:{args.http_port}{target}"
    auth = base64.b64encode(f"{args.user}:{args.password}".encode()).decode()
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"Basic {auth}"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        raise ApiError(_why(e)) from None
    except (OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise ApiError(f"cannot reach the management API at {args.host}:{args.http_port} "
                       f"({reason}); serve --http-port sets it") from None
    return json.loads(body) if body else None


def _why(e: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(e.read())
        detail = f"{doc.get('error')}: {doc.get('reason')}"
    except (ValueError, AttributeError):
        detail = e.reason
    return f"{e.code} {detail}"


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "connections" and args.action == "close":
            request(args, "DELETE", f"/api/connections/{quote(args.name, safe='')}")
            print(f"closed {args.name}")
            return 0
        items = request(args, "GET", path(args))
    except ApiError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    if args.json:
        for item in items:
            print(json.dumps(item, sort_keys=True))
    else:
        print("\n".join(table(items, COLUMNS[args.command])))
    return 0
