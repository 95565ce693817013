"""`streamlet ping`: connect and log in as rabbitmq-diagnostics ping does; one line with the
server's product and version and the time taken (exit 0), or why not (exit 1; what answers on
a port that does not speak the RabbitMQ Stream protocol: cli/rabbitmq/ping.py)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .parser import Commands, connection
from .values import Parser, positive_float

if TYPE_CHECKING:
    from ..client import Client


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
    ping = sub.add_parser("ping", help="check that a broker answers", parents=[conn],
                          description=(
        "Connect and log in (PeerProperties, SASL, Tune, Open), as rabbitmq-diagnostics ping "
        "does: exit 0 and one line with the server's product and version as it announces "
        "them (streamlet's own version beside the RabbitMQ version it announces to clients) "
        "and the time taken, or exit 1 and why (a port that does not speak the RabbitMQ "
        "Stream protocol is named as such, with what answers there)."))
    ping.add_argument("--timeout", type=positive_float, default=10.0,
                      help="seconds to wait for the broker (default 10)")


def check(args: argparse.Namespace, parser: Parser) -> None:
    connection(args, parser)


def run(args: argparse.Namespace) -> int:
    from .stop import run_client

    return run_client(lambda: _ping(args))


async def _ping(args: argparse.Namespace) -> int:
    import time

    from .rabbitmq.ping import server_line
    from .rabbitmq.session import session

    started = time.monotonic()

    async def answered(client: Client) -> int:
        print(f"ping {args.host}:{args.port}: {server_line(client.server_properties)} "
              f"answered in {(time.monotonic() - started) * 1000:.0f} ms")
        return 0

    return await session(args, answered, timeout=args.timeout)
