"""The `streamlet` command: serve a broker, produce, consume, and manage streams."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import __version__


def _add_connection_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="broker host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5552, help="broker stream port (default 5552)")
    p.add_argument("--user", default="guest", help="user name (default guest)")
    p.add_argument("--password", default="guest", help="password (default guest)")
    p.add_argument("--vhost", default="/", help="virtual host (default /)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamlet",
        description="A stream broker that speaks the RabbitMQ Stream protocol.",
    )
    parser.add_argument("--version", action="version", version=f"streamlet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run a broker", description=(
        "Run a broker. Settings come from defaults, then --config FILE (TOML, see "
        "docs/configuration.md), then environment (STREAMLET_ADVERTISED_HOST/PORT), then flags."))
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="stream protocol port (default 5552)")
    serve.add_argument("--data-dir", help="where streams are stored (default ./data)")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--advertised-host", help="host clients are told to connect to")
    serve.add_argument("--advertised-port", type=int, help="port clients are told to connect to")
    serve.add_argument("--fsync", choices=["never", "interval", "chunk"],
                       help="when to fsync the log (default never: a confirm means the OS has it)")
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")

    produce = sub.add_parser("produce", help="publish messages to a stream", description=(
        "Publish messages: each line of standard input is one message, or --count generated "
        "messages of --size bytes. Waits for every confirm."))
    _add_connection_flags(produce)
    produce.add_argument("stream")
    produce.add_argument("--count", type=int, help="publish this many generated messages instead of stdin")
    produce.add_argument("--size", type=int, default=100, help="size of generated messages (default 100)")
    produce.add_argument("--reference", help="publisher reference, enables deduplication")
    produce.add_argument("--create", action="store_true", help="create the stream if missing")

    consume = sub.add_parser("consume", help="read messages from a stream", description=(
        "Print messages as 'offset<TAB>body' lines (body decoded as UTF-8 with replacement)."))
    _add_connection_flags(consume)
    consume.add_argument("stream")
    consume.add_argument("--offset", default="first",
                         help="first | last | next | an offset | @<ms timestamp> (default first)")
    consume.add_argument("--count", type=int, help="stop after this many messages")
    consume.add_argument("--timeout", type=float, default=None,
                         help="stop after this many seconds without a message")
    consume.add_argument("--name", help="consumer name for stored offsets")

    streams = sub.add_parser("streams", help="create, delete and inspect streams")
    _add_connection_flags(streams)
    ssub = streams.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = ssub.add_parser("create", help="create a stream")
    create.add_argument("name")
    create.add_argument("--max-age", help="retention by age, e.g. 7D, 12h")
    create.add_argument("--max-length-bytes", type=int, help="retention by size")
    create.add_argument("--max-segment-size-bytes", type=int, help="segment file size")
    create.add_argument("--filter-size-bytes", type=int, help="bloom filter size per chunk (16-255)")
    delete = ssub.add_parser("delete", help="delete a stream")
    delete.add_argument("name")
    info = ssub.add_parser("info", help="show a stream's metadata and offsets")
    info.add_argument("names", nargs="+")
    csuper = ssub.add_parser("create-super", help="create a super stream and its partition streams")
    csuper.add_argument("name")
    how = csuper.add_mutually_exclusive_group(required=True)
    how.add_argument("--partitions", type=int,
                     help="N partitions NAME-0..NAME-<N-1>, binding keys 0..N-1")
    how.add_argument("--binding-keys", help="comma-separated keys: partitions NAME-<key>")
    csuper.add_argument("--max-age", help="retention by age of each partition, e.g. 7D")
    csuper.add_argument("--max-length-bytes", type=int, help="retention by size of each partition")
    dsuper = ssub.add_parser("delete-super", help="delete a super stream and its partitions")
    dsuper.add_argument("name")
    lsuper = ssub.add_parser("partitions", help="list a super stream's partitions and binding keys")
    lsuper.add_argument("name")
    lsuper.add_argument("--keys", help="comma-separated routing keys to route (default: none)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    from . import commands  # the client side, imported only when used

    try:
        return asyncio.run(commands.run(args))
    except KeyboardInterrupt:
        return 130


def _serve(args: argparse.Namespace) -> int:
    from .broker import ConfigError, load, run

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load(args.config, host=args.host, port=args.port, data_dir=args.data_dir,
                      advertised_host=args.advertised_host, advertised_port=args.advertised_port,
                      fsync=args.fsync)
    except ConfigError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        run(config)
    except OSError as e:
        print(f"streamlet: cannot serve on {config.host}:{config.port}: {e.strerror}", file=sys.stderr)
        return 1
    except ConfigError as e:  # found when the broker starts, e.g. unreadable TLS certificates
        print(f"streamlet: {e}", file=sys.stderr)
        return 2
    logging.getLogger("streamlet").info("served for %.0f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
