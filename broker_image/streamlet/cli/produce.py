"""`streamlet produce STREAM`: standard input's lines, or --count generated messages, published
and confirmed; over RabbitMQ's protocol by cli/rabbitmq/produce.py, over another --protocol by
its hooks (cli/protocols/)."""

from __future__ import annotations

import argparse

from .parser import Commands, connection, format_option, protocol, protocol_option
from .protocols import PROTOCOLS
from .values import Parser, non_negative_int, positive_int


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
    produce = sub.add_parser("produce", help="publish messages to a stream", parents=[conn],
                             description=(
        "Publish messages: each line of standard input is one message, or --count generated "
        "messages of --size bytes. Waits for every confirm."))
    produce.add_argument("stream")
    produce.add_argument("--count", type=positive_int,
                         help="publish this many generated messages instead of stdin")
    produce.add_argument("--size", type=non_negative_int, default=None, help=(
        "size of generated messages, with --count (default 100; standard input's lines are "
        "sent as they are)"))
    produce.add_argument("--reference", help=(
        "publisher reference: message i of the input (line i, or generated message i) gets "
        "publishing id i, and those up to the sequence stored for the reference are skipped, "
        "so running the same input again stores nothing twice"))
    produce.add_argument("--create", action="store_true", help="create the stream if missing")
    produce.add_argument("--routing-key", metavar="KEY", help=(
        "STREAM is a super stream: publish to the partition its binding KEY routes to (the "
        "Route command, as a super stream producer with key routing does)"))
    format_option(produce, "each message sent as is (raw), or as an AMQP 1.0 message with the "
                           "input in one data section (amqp), as RabbitMQ's clients send and "
                           "their AMQP decoders expect")
    protocol_option(produce)


def check(args: argparse.Namespace, parser: Parser) -> None:
    if args.size is not None and args.count is None:
        parser.error("--size: the size of generated messages, with --count (standard "
                     "input's lines are sent as they are)")
    args.size = 100 if args.size is None else args.size
    protocol(args, parser)
    connection(args, parser)


def run(args: argparse.Namespace) -> int:
    from .stop import run_client

    if PROTOCOLS[args.protocol].hooks is None:  # RabbitMQ's own
        from .rabbitmq.produce import run as produce
    else:
        from .protocols.commands import run as produce
    return run_client(lambda: produce(args))
