"""The commands on the management HTTP API: `connections list|close`, `publishers list`,
`consumers list`, `streams list`. HTTP with Basic authentication, as a script written for
RabbitMQ's management API would make it; HTTPS with --tls (--ca-cert, --cert, --key as for
the stream port).

They talk to the broker at --host/--port: without --http-port, its API's port is the one it
announces in PeerProperties (``streamlet_http_port``, with --tls ``streamlet_https_port``; 0
or absent: none); a broker that announces none (RabbitMQ) is asked on 15672 (15671 with
--tls), whose API must list a stream listener on --port, or the command fails naming both
ports: never another broker's lists. A 404 names the object that is missing."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import socket
import ssl
import struct
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from ..client.tls import client_context
from ..rabbitmq import Code, frames
from .tables import COLUMNS, table

TIMEOUT_S = 30.0
#: RabbitMQ's management ports: where a broker that does not announce its own is asked
DEFAULT_HTTP_PORT = 15672
DEFAULT_HTTPS_PORT = 15671
#: the PeerProperties keys a streamlet broker announces its management API's ports in
ANNOUNCED = "streamlet_http_port"
ANNOUNCED_TLS = "streamlet_https_port"
#: a PeerProperties answer bigger than this is not one
MAX_ANSWER = 1 << 20


class ApiError(Exception):
    """A one-line reason a request failed."""


class NotFound(ApiError):
    """A 404: the object the path names does not exist."""


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


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """With --tls, the client's context: the server checked against --ca-cert (else the
    system's CAs) and its name, --cert/--key offered."""
    if not getattr(args, "tls", False):
        return None
    try:
        return client_context(args.ca_cert, args.cert, args.key)
    except (OSError, ssl.SSLError) as e:
        raise ApiError(f"cannot load the TLS files (--ca-cert, --cert, --key): {e}") from None


def request(args: argparse.Namespace, method: str, target: str, body: Any = None) -> Any:
    """``body``: sent as JSON when given (a PUT's)."""
    ctx = tls_context(args)
    url = f"{'https' if ctx is not None else 'http'}://{args.host}:{args.http_port}{target}"
    auth = base64.b64encode(f"{args.user}:{args.password}".encode()).decode()
    headers = {"Authorization": f"Basic {auth}"}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=ctx) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        raise (NotFound if e.code == 404 else ApiError)(_why(e)) from None
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


# --- which API: the broker's at --host/--port --------------------------------------------------

def announced_properties(host: str, port: int, timeout: float = TIMEOUT_S,
                         ctx: ssl.SSLContext | None = None) -> dict[str, str]:
    """The server properties of the broker at ``host:port`` (over TLS with ``ctx``): the
    PeerProperties exchange that opens every RabbitMQ Stream connection, and no more (no
    login: any user may ask)."""
    ask = frames.PeerProperties(1, {"product": "streamlet",
                                    "connection_name": "streamlet CLI: management API port"})
    try:
        with contextlib.ExitStack() as stack:
            s = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
            if ctx is not None:
                s = stack.enter_context(ctx.wrap_socket(s, server_hostname=host))
            s.sendall(frames.encode(ask))
            (size,) = struct.unpack(">I", _read(s, 4))
            if size > MAX_ANSWER:
                raise ApiError(f"{host}:{port} does not speak the RabbitMQ Stream protocol "
                               f"(a {size}-byte answer to PeerProperties)")
            answer = frames.decode(_read(s, size))
    except (OSError, TimeoutError) as e:
        raise ApiError(f"cannot reach the broker at {host}:{port} to find its management API "
                       f"({e}); --http-port P names the API's port") from None
    if not isinstance(answer, frames.PeerPropertiesResponse) or answer.code != Code.OK:
        raise ApiError(f"{host}:{port} did not answer PeerProperties as a RabbitMQ Stream "
                       "broker does; --http-port P names its management API's port")
    return dict(answer.properties)


def _read(s: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        got = s.recv(n - len(data))
        if not got:
            raise ConnectionResetError("the broker closed the connection")
        data += got
    return bytes(data)


def api_port(properties: dict[str, str], host: str, port: int,
             tls: bool = False) -> tuple[int, bool]:
    """Where the management API (over TLS: ``tls``) of the broker whose server properties are
    ``properties`` is, and whether that must be checked (its /api/overview lists a stream
    listener on ``port``): the announced port as is (0 or absent: it serves none there,
    ApiError saying where it does); RabbitMQ's default, checked, for a broker that announces
    none."""
    plain, secure = properties.get(ANNOUNCED), properties.get(ANNOUNCED_TLS)
    if plain is None:
        return (DEFAULT_HTTPS_PORT if tls else DEFAULT_HTTP_PORT), True
    text, key = (secure or "0", ANNOUNCED_TLS) if tls else (plain, ANNOUNCED)
    if text == "0":
        if tls and plain != "0":
            raise ApiError(f"the broker at {host}:{port} serves its management API in plain "
                           f"HTTP only (port {plain}): leave out --tls")
        if not tls and secure:
            raise ApiError(f"the broker at {host}:{port} serves its management API over HTTPS "
                           f"only (port {secure}): give --tls (and --ca-cert) and its TLS "
                           "--port")
        raise ApiError(f"the broker at {host}:{port} serves no management API (serve "
                       "--http-port P, or [listeners.http], turns it on)")
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise ApiError(f"the broker at {host}:{port} announced {key}={text!r}, not a "
                       "port; --http-port P names its management API's port")
    return int(text), False


def stream_ports(overview: Any) -> list[int]:
    """The stream protocol ports an /api/overview lists (RabbitMQ's and streamlet's: listeners
    whose protocol is ``stream`` or ``stream/ssl``)."""
    listeners = overview.get("listeners") if isinstance(overview, dict) else None
    ports = []
    for lst in listeners if isinstance(listeners, list) else []:
        if isinstance(lst, dict) and str(lst.get("protocol", "")).startswith("stream"):
            try:
                ports.append(int(lst["port"]))
            except (KeyError, TypeError, ValueError):
                continue
    return sorted(set(ports))


def find_api(args: argparse.Namespace) -> None:
    """Set ``args.http_port`` to the management API of the broker at --host/--port, unless
    --http-port gave it."""
    if args.http_port is not None:
        return
    ctx = tls_context(args)
    args.http_port, check = api_port(announced_properties(args.host, args.port, ctx=ctx),
                                     args.host, args.port, ctx is not None)
    if not check:
        return
    ports = stream_ports(request(args, "GET", "/api/overview"))
    if args.port not in ports:
        listed = ", ".join(map(str, ports)) or "none"
        raise ApiError(f"the management API on {args.host}:{args.http_port} is not the one of "
                       f"the broker at {args.host}:{args.port} (its stream ports: {listed}); "
                       "--http-port P names the right one")


# --- the commands -------------------------------------------------------------------------------

def missing(args: argparse.Namespace) -> str:
    """What a 404 of the command's request means, in words."""
    if args.command == "connections" and args.action == "close":
        return (f"no connection {args.name!r} on {args.host}:{args.port} ('streamlet "
                "connections list' shows their names)")
    vhost = getattr(args, "vhost_filter", None)
    stream = getattr(args, "stream", None)
    if stream is not None:
        vhost = "/" if vhost is None else vhost
        try:
            request(args, "GET", f"/api/vhosts/{quote(vhost, safe='')}")
        except NotFound:
            return f"no virtual host {vhost!r} on {args.host}:{args.port}"
        except ApiError:
            pass
        return f"no stream {stream!r} in virtual host {vhost!r} on {args.host}:{args.port}"
    if vhost is not None:
        return f"no virtual host {vhost!r} on {args.host}:{args.port}"
    return f"{path(args)} not found on {args.host}:{args.http_port}"


def run(args: argparse.Namespace) -> int:
    try:
        find_api(args)
        try:
            if args.command == "connections" and args.action == "close":
                request(args, "DELETE", f"/api/connections/{quote(args.name, safe='')}")
                print(f"closed {args.name}")
                return 0
            items = request(args, "GET", path(args))
        except NotFound:
            raise ApiError(missing(args)) from None
    except ApiError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    if args.json:
        for item in items:
            print(json.dumps(item, sort_keys=True))
    else:
        print("\n".join(table(items, COLUMNS[args.command])))
    return 0
