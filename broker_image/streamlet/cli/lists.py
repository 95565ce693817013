"""`streamlet connections list|close`, `publishers list`, `consumers list`: the management
API's lists (docs/operations.md), filtered by what --user may see; run by cli/mgmt.py, which
finds the broker's API from --host/--port."""

from __future__ import annotations

import argparse

from .parser import Commands, connection, http_options
from .values import Parser


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
    http = http_options()
    cmd = sub.add_parser("connections", help="list or close client connections (management API)",
                         parents=[conn, http])
    csub = cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    csub.add_parser("list", help="list connections: name, user, vhost, protocol, publishers, "
                    "consumers, client", parents=[conn, http], description=(
        "List the client connections --user may see (an administrator: all; another user: its "
        "own), through GET /api/connections. --vhost narrows it to one virtual host."))
    close = csub.add_parser("close", help="close a connection by name", parents=[conn, http],
                            description=(
        "Close the connection NAME (as `connections list` shows it, e.g. '127.0.0.1:40312 -> "
        "127.0.0.1:5552') through DELETE /api/connections/NAME: a RabbitMQ Stream client is "
        "sent a Close. Another user's connection needs an administrator (a user without "
        "[[permissions]] entries)."))
    close.add_argument("name")
    for what, shown in (("publishers", "connection, stream, publisher id, reference"),
                        ("consumers", "connection, stream, subscription id, credits, offset, "
                                      "lag, status")):
        p = sub.add_parser(what, help=f"list stream {what} (management API)",
                           parents=[conn, http])
        p.add_argument("--stream", default=argparse.SUPPRESS, help=f"only this stream's {what}")
        psub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        lst = psub.add_parser("list", help=f"list {what}: {shown}", parents=[conn, http],
                              description=(
            f"List the stream {what} --user may see, through GET /api/stream/{what}. --vhost "
            "narrows it to one virtual host, --stream to one stream (of --vhost, default /)."))
        lst.add_argument("--stream", default=argparse.SUPPRESS,
                         help=f"only this stream's {what}")


def check(args: argparse.Namespace, parser: Parser) -> None:
    connection(args, parser, http=True)


def run(args: argparse.Namespace) -> int:
    from . import mgmt

    return mgmt.run(args)
