"""`streamlet consume STREAM`: messages printed as 'offset<TAB>body' lines; over RabbitMQ's
protocol by cli/rabbitmq/consume.py (resuming on another member when its broker is lost), over
another --protocol by its hooks (cli/protocols/)."""

from __future__ import annotations

import argparse

from .parser import Commands, connection, format_option, protocol, protocol_option
from .protocols import PROTOCOLS
from .values import Parser, positive_float, positive_int
from .values import offset as offset_value


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
    consume = sub.add_parser("consume", help="read messages from a stream", parents=[conn],
                             description=(
        "Print messages as 'offset<TAB>body' lines (body decoded as UTF-8 with replacement). "
        "Over RabbitMQ's protocol it reads on the broker given when that one holds the stream "
        "(its leader or a replica), else on a member it names; a broker lost meanwhile (a "
        "leader's failover, a restart) is replaced by another member, or the same one back, "
        "within 60 s, after the last offset printed: each message once, in order."))
    consume.add_argument("stream")
    consume.add_argument("--offset", type=offset_value, default=None, help=(
        "first | last | next | an offset | @<ms timestamp> (default: after the offset stored "
        "for --name if there is one, else first)"))
    consume.add_argument("--count", type=positive_int, help="stop after this many messages")
    consume.add_argument("--timeout", type=positive_float, default=None,
                         help="stop after this many seconds without a message")
    consume.add_argument("--name", help=(
        "consumer name: without --offset, resume after the offset stored under it; the last "
        "offset printed is stored under it when consume ends (--count, --timeout, a closed "
        "pipe, Ctrl-C or SIGTERM)"))
    format_option(consume, "print each body as stored (raw), or the body of an AMQP 1.0 "
                           "message as RabbitMQ's clients publish it (amqp: its data sections, "
                           "or its amqp-value; a message that is not AMQP is printed raw, with "
                           "a warning)")
    protocol_option(consume)


def check(args: argparse.Namespace, parser: Parser) -> None:
    protocol(args, parser)
    connection(args, parser)


def run(args: argparse.Namespace) -> int:
    from .stop import run_client

    if PROTOCOLS[args.protocol].hooks is None:  # RabbitMQ's own
        from .rabbitmq.consume import run as consume
    else:
        from .protocols.commands import run as consume
    return run_client(lambda: consume(args))
