"""The client-side CLI commands: produce, consume, streams. Errors become one-line messages."""

from __future__ import annotations

import argparse
import ssl
import sys
import time
from collections.abc import Awaitable, Callable

from ..client import Client, StreamletError, connect
from ..client.tls import client_context
from ..rabbitmq import Code
from ..rabbitmq.constants import STREAM_DETAILS
from .consume import consume
from .hints import super_stream_hint
from .info import info
from .ping import server_line, what_answers
from .produce import produce
from .stop import stoppable


async def run(args: argparse.Namespace) -> int:
    """The command, stopped cleanly by SIGINT or SIGTERM (see clitools.stop)."""
    return await stoppable(lambda: _run(args))


async def _partition(client: Client, super_stream: str, key: str) -> str:
    """The one partition of ``super_stream`` that binding ``key`` routes to."""
    partitions = await client.route(key, super_stream)
    if len(partitions) != 1:
        raise ValueError(f"routing key {key!r} routes to {len(partitions)} partitions of "
                         f"{super_stream} ({', '.join(partitions) or 'none'}): --routing-key "
                         "needs exactly one")
    return partitions[0]


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """--tls: the server's certificate verified (against --ca-cert, else the system's CAs),
    with --cert/--key offered as the client's."""
    return client_context(args.ca_cert, args.cert, args.key) if args.tls else None


def _properties(args: argparse.Namespace) -> dict[str, str]:
    """`streams info` asks the broker for StreamStats' details (broker.rabbitmq.streams)."""
    if getattr(args, "action", None) == "info":
        return {STREAM_DETAILS: "true"}
    return {}


async def _run(args: argparse.Namespace) -> int:
    if args.command == "perf":  # its own connections, in worker processes
        from ..perf.run import perf

        return await perf(args)
    started = time.monotonic()
    try:
        client = await connect(args.host, args.port, user=args.user, password=args.password,
                               vhost=args.vhost, properties=_properties(args),
                               ssl=_tls_context(args), mechanism=args.sasl_mechanism,
                               timeout=getattr(args, "timeout", None) if args.command == "ping"
                               else 30.0)
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
            if args.command == "ping":
                print(f"ping {args.host}:{args.port}: {server_line(client.server_properties)} "
                      f"answered in {(time.monotonic() - started) * 1000:.0f} ms")
                return 0
            if args.command in ("produce", "consume"):
                if getattr(args, "routing_key", None) is not None:
                    args.stream = await _partition(client, args.stream, args.routing_key)
                elif (hint := await super_stream_hint(client, args.command, args.stream)):
                    raise ValueError(hint)  # before --create makes a stream of that name
                if args.command == "consume":  # on this broker if it holds the stream
                    return await consume(client, args, _opener(args))
                if args.command == "produce" and args.create:
                    await client.create_stream(args.stream, exists_ok=True)
                leader = await client.leader(args.stream)
                if leader is not None and not client.is_local(leader):
                    # the stream lives on another broker (a pod of the same cluster): go there
                    print(f"streamlet: {args.stream} is on {leader[0]}:{leader[1]}", file=sys.stderr)
                    async with await connect(leader[0], leader[1], user=args.user,
                                             password=args.password, vhost=args.vhost,
                                             ssl=_tls_context(args),
                                             mechanism=args.sasl_mechanism) as owner:
                        return await _client_command(owner, args)
                return await _client_command(client, args)
            return await _streams(client, args)
    except StreamletError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 2


def _opener(args: argparse.Namespace) -> Callable[[str, int], Awaitable[Client]]:
    """How a command opens a connection to another broker of the cluster: as it opened its
    first, with its credentials and TLS."""
    async def opener(host: str, port: int) -> Client:
        return await connect(host, port, user=args.user, password=args.password,
                             vhost=args.vhost, properties=_properties(args),
                             ssl=_tls_context(args), mechanism=args.sasl_mechanism)
    return opener


async def _client_command(client: Client, args: argparse.Namespace) -> int:
    if args.command == "produce":
        return await produce(client, args)
    return await consume(client, args)


def _stream_arguments(args: argparse.Namespace) -> dict[str, str]:
    """The protocol's Create arguments from the flags given (retention, segment, filter,
    copies)."""
    flags = {"max_age": "max-age", "max_length_bytes": "max-length-bytes",
             "max_segment_size_bytes": "stream-max-segment-size-bytes",
             "filter_size_bytes": "stream-filter-size-bytes",
             "replicas": "initial-cluster-size"}
    return {arg: str(getattr(args, flag)) for flag, arg in flags.items()
            if getattr(args, flag, None) is not None}


async def _streams(client: Client, args: argparse.Namespace) -> int:
    if args.action == "create":
        return await _create(client, args)
    if args.action == "delete":
        await client.delete_stream(args.name)
        print(f"deleted {args.name}")
    elif args.action in ("create-super", "delete-super", "partitions"):
        return await _super_streams(client, args)
    else:
        return await info(client, args, _opener(args))
    return 0


async def _create(client: Client, args: argparse.Namespace) -> int:
    """`streams create`; with --replicas N > 1, the members made are checked: a broker outside
    a cluster makes a single copy of any Create, so that one is deleted again and refused."""
    arguments = _stream_arguments(args)
    try:
        await client.create_stream(args.name, arguments)
    except StreamletError as e:
        if e.code != Code.PRECONDITION_FAILED:
            raise
        from .why import create_refused  # the broker's rules: imported when needed

        why = await create_refused(client, args.name, arguments)
        print(f"streamlet: cannot create {args.name}: {why}", file=sys.stderr)
        return 1
    asked = getattr(args, "replicas", None) or 1
    if asked == 1:
        print(f"created {args.name}")
        return 0
    meta = await client.metadata([args.name])
    brokers = {b.reference: f"{b.host}:{b.port}" for b in meta.brokers}
    entry = next((m for m in meta.streams if m.stream == args.name), None)
    replicas = [brokers.get(r, str(r)) for r in entry.replicas] if entry is not None else []
    if not replicas:
        await client.delete_stream(args.name, missing_ok=True)
        print(f"streamlet: cannot create {args.name} with {asked} replicas: the broker at "
              f"{args.host}:{args.port} is not in a cluster (no [cluster] peers; 'streamlet "
              f"cluster up' or the operator runs brokers that are), so nothing was created",
              file=sys.stderr)
        return 1
    leader = brokers.get(entry.leader, "none yet") if entry is not None else "none yet"
    print(f"created {args.name}: {len(replicas) + 1} copies, leader {leader}, replicas "
          f"{', '.join(replicas)}")
    if len(replicas) + 1 < asked:
        print(f"streamlet: {asked} replicas asked, the cluster has {len(replicas) + 1} "
              "brokers: one copy on each", file=sys.stderr)
    return 0


async def _super_streams(client: Client, args: argparse.Namespace) -> int:
    if args.action == "create-super":
        if args.partitions is not None:
            if args.partitions < 1:
                print("streamlet: --partitions must be at least 1", file=sys.stderr)
                return 2
            keys = [str(i) for i in range(args.partitions)]
        else:
            keys = [k.strip() for k in args.binding_keys.split(",") if k.strip()]
        partitions = [f"{args.name}-{k}" for k in keys]
        await client.create_super_stream(args.name, partitions, keys, _stream_arguments(args))
        print(f"created super stream {args.name}: {', '.join(partitions)}")
    elif args.action == "delete-super":
        await client.delete_super_stream(args.name)
        print(f"deleted super stream {args.name}")
    else:
        for p in await client.partitions(args.name):
            print(p)
        for key in (args.keys or "").split(","):
            if key:
                print(f"route {key}\t{','.join(await client.route(key, args.name)) or '-'}")
    return 0
