"""The client-side CLI commands: produce, consume, streams. Errors become one-line messages."""

from __future__ import annotations

import argparse
import asyncio
import sys

from .client import Client, OffsetSpec, StreamletError, connect


def _offset(text: str) -> OffsetSpec:
    if text.startswith("@"):
        return OffsetSpec.timestamp(int(text[1:]))
    if text.isdigit():
        return OffsetSpec.offset(int(text))
    return OffsetSpec.parse(text)


async def run(args: argparse.Namespace) -> int:
    if getattr(args, "protocol", "rabbitmq") != "rabbitmq":  # produce|consume over MEGA or RSIO
        from . import other_protocols

        return await other_protocols.run(args)
    try:
        client = await connect(args.host, args.port, user=args.user, password=args.password,
                               vhost=args.vhost)
    except (OSError, TimeoutError) as e:
        print(f"streamlet: cannot connect to {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    except StreamletError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    try:
        async with client:
            if args.command in ("produce", "consume"):
                if args.command == "produce" and args.create:
                    await client.create_stream(args.stream, exists_ok=True)
                leader = await client.leader(args.stream)
                if leader is not None and not client.is_local(leader):
                    # the stream lives on another broker (a pod of the same cluster): go there
                    print(f"streamlet: {args.stream} is on {leader[0]}:{leader[1]}", file=sys.stderr)
                    async with await connect(leader[0], leader[1], user=args.user,
                                             password=args.password, vhost=args.vhost) as owner:
                        return await _client_command(owner, args)
                return await _client_command(client, args)
            return await _streams(client, args)
    except StreamletError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 2


async def _client_command(client: Client, args: argparse.Namespace) -> int:
    if args.command == "produce":
        return await _produce(client, args)
    return await _consume(client, args)


async def _produce(client: Client, args: argparse.Namespace) -> int:
    async with await client.producer(args.stream, reference=args.reference) as producer:
        if args.count is not None:
            body = b"x" * args.size
            await producer.send_many(body for _ in range(args.count))
            sent = args.count
        else:
            sent = 0
            loop = asyncio.get_running_loop()
            while line := await loop.run_in_executor(None, sys.stdin.buffer.readline):
                await producer.send(line.rstrip(b"\n"))
                sent += 1
        await producer.flush()
    print(f"published {sent} messages to {args.stream}", file=sys.stderr)
    return 0


async def _consume(client: Client, args: argparse.Namespace) -> int:
    consumer = await client.consumer(args.stream, offset=_offset(args.offset), name=args.name)
    seen = 0
    last: int | None = None
    try:
        it = aiter(consumer)
        while args.count is None or seen < args.count:
            try:
                msg = await asyncio.wait_for(anext(it), args.timeout)
            except TimeoutError:
                break
            sys.stdout.write(f"{msg.offset}\t{msg.body.decode('utf-8', 'replace')}\n")
            seen += 1
            last = msg.offset
    finally:
        sys.stdout.flush()
        if args.name and last is not None:
            await consumer.store_offset(last)
        await consumer.close()
    return 0


def _stream_arguments(args: argparse.Namespace) -> dict[str, str]:
    """The protocol's Create arguments from the flags given (retention, segment, filter)."""
    flags = {"max_age": "max-age", "max_length_bytes": "max-length-bytes",
             "max_segment_size_bytes": "stream-max-segment-size-bytes",
             "filter_size_bytes": "stream-filter-size-bytes"}
    return {arg: str(getattr(args, flag)) for flag, arg in flags.items()
            if getattr(args, flag, None) is not None}


async def _streams(client: Client, args: argparse.Namespace) -> int:
    if args.action == "create":
        await client.create_stream(args.name, _stream_arguments(args))
        print(f"created {args.name}")
    elif args.action == "delete":
        await client.delete_stream(args.name)
        print(f"deleted {args.name}")
    elif args.action in ("create-super", "delete-super", "partitions"):
        return await _super_streams(client, args)
    else:
        for name in args.names:
            where = await client.leader(name)
            if where is None:
                print(f"{name}\tmissing")
            elif not client.is_local(where):  # held by another broker of the cluster
                print(f"{name}\ton {where[0]}:{where[1]}")
            else:
                stats = await client.stream_stats(name)
                print(f"{name}\tfirst_chunk_id={stats['first_chunk_id']}\t"
                      f"committed_chunk_id={stats['committed_chunk_id']}\tlast_chunk_id={stats['last_chunk_id']}")
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
