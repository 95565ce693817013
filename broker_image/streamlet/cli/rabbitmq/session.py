"""A client command's connection over the RabbitMQ Stream protocol: opened to --host/--port
with the user's credentials and TLS, run, closed. Its failures are one line on stderr: exit 1
when it cannot connect or the broker refuses (a port that does not speak the protocol is named
with what answers there), exit 2 for a ValueError the command raises (a usage the broker's
state refuses, e.g. a super stream given as a stream)."""

from __future__ import annotations

import argparse
import ssl
import sys
from collections.abc import Awaitable, Callable

from ...client import Client, StreamletError, connect
from ...client.tls import client_context
from ...rabbitmq import Code
from .hints import super_stream_hint
from .ping import what_answers

#: opens a client to another broker (with the command's credentials, TLS and properties)
Opener = Callable[[str, int], Awaitable[Client]]


async def session(args: argparse.Namespace, command: Callable[[Client], Awaitable[int]], *,
                  timeout: float | None = 30.0, properties: dict[str, str] | None = None) -> int:
    """``command`` run on a connection to --host/--port; its exit code, or 1 or 2 and why."""
    try:
        client = await connect(args.host, args.port, user=args.user, password=args.password,
                               vhost=args.vhost, properties=properties or {},
                               ssl=tls_context(args), mechanism=args.sasl_mechanism,
                               timeout=timeout)
    except ssl.SSLError as e:  # before OSError, its base: a certificate or a handshake refused
        print(f"streamlet: TLS with {args.host}:{args.port} failed: {e.reason or e}",
              file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as e:
        print(f"streamlet: cannot connect to {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    except StreamletError as e:
        found = None
        if e.code in (Code.STREAM_NOT_AVAILABLE, Code.INTERNAL_ERROR):  # not the protocol's?
            found = await what_answers(args.host, args.port)
        print(f"streamlet: {found} ({e.message})" if found else f"streamlet: {e}",
              file=sys.stderr)
        return 1
    try:
        async with client:
            return await command(client)
    except StreamletError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 2


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """--tls: the server's certificate verified (against --ca-cert, else the system's CAs),
    with --cert/--key offered as the client's."""
    return client_context(args.ca_cert, args.cert, args.key) if args.tls else None


def opener_for(args: argparse.Namespace, properties: dict[str, str] | None = None) -> Opener:
    """How a command opens a connection to another broker of the cluster: as it opened its
    first, with its credentials and TLS."""
    async def open_(host: str, port: int) -> Client:
        return await connect(host, port, user=args.user, password=args.password,
                             vhost=args.vhost, properties=properties or {},
                             ssl=tls_context(args), mechanism=args.sasl_mechanism)
    return open_


async def stream_of(client: Client, args: argparse.Namespace) -> str:
    """The stream `produce` or `consume` works on: with --routing-key, the one partition of
    super stream STREAM its binding key routes to; else STREAM, refused (ValueError) when it
    is no stream but a super stream is called so."""
    if getattr(args, "routing_key", None) is not None:
        partitions = await client.route(args.routing_key, args.stream)
        if len(partitions) != 1:
            raise ValueError(f"routing key {args.routing_key!r} routes to {len(partitions)} "
                             f"partitions of {args.stream} ({', '.join(partitions) or 'none'}): "
                             "--routing-key needs exactly one")
        return partitions[0]
    if (hint := await super_stream_hint(client, args.command, args.stream)):
        raise ValueError(hint)  # before --create makes a stream of that name
    return str(args.stream)
