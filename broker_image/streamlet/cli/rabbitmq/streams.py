"""`streamlet streams create|delete|info|create-super|delete-super|partitions` over the RabbitMQ
Stream protocol (`streams list` is the management API's, cli/mgmt.py). A refused Create is
named in words (why.py); `create --replicas N` checks the members the broker made."""

from __future__ import annotations

import argparse
import sys

from ...client import Client, StreamletError
from ...rabbitmq import Code
from ...rabbitmq.constants import STREAM_DETAILS
from .info import info
from .session import opener_for, session


async def run(args: argparse.Namespace) -> int:
    # `streams info` asks the broker for StreamStats' details (broker.rabbitmq.streams)
    properties = {STREAM_DETAILS: "true"} if args.action == "info" else {}
    return await session(args, lambda client: _streams(client, args, properties),
                         properties=properties)


def _stream_arguments(args: argparse.Namespace) -> dict[str, str]:
    """The protocol's Create arguments from the flags given (retention, segment, filter,
    copies)."""
    flags = {"max_age": "max-age", "max_length_bytes": "max-length-bytes",
             "max_segment_size_bytes": "stream-max-segment-size-bytes",
             "filter_size_bytes": "stream-filter-size-bytes",
             "replicas": "initial-cluster-size"}
    return {arg: str(getattr(args, flag)) for flag, arg in flags.items()
            if getattr(args, flag, None) is not None}


async def _streams(client: Client, args: argparse.Namespace, properties: dict[str, str]) -> int:
    if args.action == "create":
        return await _create(client, args)
    if args.action == "delete":
        await client.delete_stream(args.name)
        print(f"deleted {args.name}")
    elif args.action in ("create-super", "delete-super", "partitions"):
        return await _super_streams(client, args)
    else:
        return await info(client, args, opener_for(args, properties))
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
