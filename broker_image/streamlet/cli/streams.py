"""`streamlet streams ACTION`: create, delete, inspect streams and super streams over the
RabbitMQ Stream protocol (cli/rabbitmq/streams.py); `streams list` through the management
HTTP API (cli/mgmt.py)."""

from __future__ import annotations

import argparse

from .parser import Commands, connection, http_options
from .values import Parser, non_negative_int, positive_int, stream_name


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
    streams = sub.add_parser("streams", help="create, delete, list and inspect streams",
                             parents=[conn])
    ssub = streams.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = ssub.add_parser("create", help="create a stream", parents=[conn])
    create.add_argument("name", type=stream_name)
    create.add_argument("--max-age", help="retention by age, e.g. 7D, 12h")
    create.add_argument("--max-length-bytes", type=non_negative_int, help="retention by size")
    create.add_argument("--max-segment-size-bytes", type=non_negative_int, help="segment file size")
    create.add_argument("--filter-size-bytes", type=non_negative_int, help="bloom filter size per chunk (16-255)")
    create.add_argument("--replicas", type=positive_int, metavar="N", help=(
        "N copies on N brokers of a cluster (cluster up, the operator): a leader and N-1 "
        "followers, a publish confirmed once a majority holds it (RabbitMQ's "
        "initial-cluster-size argument; default 1). Refused by a broker that is not in a "
        "cluster"))
    delete = ssub.add_parser("delete", help="delete a stream", parents=[conn])
    delete.add_argument("name")
    info = ssub.add_parser("info", help="show streams' leader, replicas, offsets, size, retention",
                          parents=[conn], description=(
        "For each stream: leader and replicas, first and last committed offset, messages, size "
        "on disk and segments, retention, stored consumer offsets and publisher sequences. "
        "Exit 1 if a stream does not exist (the others are shown)."))
    ssub.add_parser("list", help="list streams: messages, size, segments, leader "
                            "(management API)", parents=[conn, http_options()], description=(
        "List the streams the user may see, through the management HTTP API's /api/queues "
        "(its JSON, with --json): messages, size on disk, segments, publishers, consumers and "
        "leader. --vhost narrows it to one virtual host."))
    info.add_argument("names", nargs="+")
    info.add_argument("--json", action="store_true",
                      help="one JSON object a stream (every key the broker gave)")
    csuper = ssub.add_parser("create-super", help="create a super stream and its partition streams",
                             parents=[conn])
    csuper.add_argument("name")
    how = csuper.add_mutually_exclusive_group(required=True)
    how.add_argument("--partitions", type=positive_int,
                     help="N partitions NAME-0..NAME-<N-1>, binding keys 0..N-1")
    how.add_argument("--binding-keys", help="comma-separated keys: partitions NAME-<key>")
    csuper.add_argument("--max-age", help="retention by age of each partition, e.g. 7D")
    csuper.add_argument("--max-length-bytes", type=non_negative_int, help="retention by size of each partition")
    dsuper = ssub.add_parser("delete-super", help="delete a super stream and its partitions",
                             parents=[conn])
    dsuper.add_argument("name")
    lsuper = ssub.add_parser("partitions", help="list a super stream's partitions; with --keys, "
                             "where routing keys go", parents=[conn], description=(
        "Print the partitions of super stream NAME, one a line, in order (the Partitions "
        "command). With --keys K1,K2: then a line 'route K<TAB>partition,...' for each key, "
        "naming the partitions the Route command sends it to ('-': none), as a super stream "
        "producer routing by key (and produce --routing-key) would."))
    lsuper.add_argument("name")
    lsuper.add_argument("--keys", metavar="K1,K2", help=(
        "comma-separated routing keys: print where each routes (default: none)"))


def check(args: argparse.Namespace, parser: Parser) -> None:
    connection(args, parser, http=args.action == "list")


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        from . import mgmt

        return mgmt.run(args)
    from .rabbitmq.streams import run as streams
    from .stop import run_client

    return run_client(lambda: streams(args))
