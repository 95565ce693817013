"""The `streamlet` command: serve a broker, produce, consume, and manage streams."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from .output import silence_stdout
from .values import Parser, non_negative_int, positive_float, positive_int, stream_name
from .values import offset as offset_value
from .values import port as port_number

#: the client commands' connection options and their defaults, filled in by :func:`parse`
CONNECTION_DEFAULTS: dict[str, object] = {
    "host": "127.0.0.1", "port": 5552, "user": "guest", "password": "guest", "vhost": "/",
    "tls": False, "ca_cert": None, "cert": None, "key": None, "sasl_mechanism": "PLAIN"}


def _connection_options(serve: bool = False) -> Parser:
    """A parent parser of the connection options, attached to every level (the program, each
    command, each `streams` action) so that they may be typed anywhere.

    Their default is SUPPRESS: a level where an option is not given adds nothing, so it cannot
    undo the value given at an earlier level (argparse copies a sub-parser's whole namespace
    over its parent's); the defaults are filled in once parsing is done. ``serve=True`` makes
    the program level's copy, whose --host and --port also give serve's listen address."""
    p = Parser(add_help=False)
    g = p.add_argument_group("connection options (accepted before or after any command)")
    host, port_help = "broker host (default 127.0.0.1)", "broker stream port (default 5552)"
    if serve:
        host = f"{host}; for serve and cluster up, the listen address"
        port_help = f"{port_help}; for serve, the listen port; for cluster up, node 0's"
    g.add_argument("--host", default=argparse.SUPPRESS, help=host)
    g.add_argument("--port", type=port_number, default=argparse.SUPPRESS, help=port_help)
    g.add_argument("--user", default=argparse.SUPPRESS,
                   help="user name (default: $STREAMLET_USER, else guest)")
    g.add_argument("--password", default=argparse.SUPPRESS, help=(
        "password (default: the first line of --password-file, else $STREAMLET_PASSWORD, else "
        "guest); a password on the command line is visible to other users in ps"))
    g.add_argument("--password-file", type=Path, default=argparse.SUPPRESS,
                   help="read the password from the first line of this file")
    g.add_argument("--vhost", default=argparse.SUPPRESS, help="virtual host (default /)")
    g.add_argument("--tls", action="store_true", default=argparse.SUPPRESS,
                   help="connect with TLS (the broker's [tls] port), verifying its certificate")
    g.add_argument("--ca-cert", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                   help="with --tls: trust the CAs in FILE (PEM) instead of the system's")
    g.add_argument("--cert", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                   help="with --tls: a client certificate (PEM), for EXTERNAL or a broker "
                        "that requires one")
    g.add_argument("--key", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                   help="with --cert: its private key (PEM; default: in the --cert file)")
    g.add_argument("--sasl-mechanism", choices=("PLAIN", "EXTERNAL"), type=str.upper,
                   default=argparse.SUPPRESS, help=(
        "PLAIN (user and password, the default) or EXTERNAL (the --cert certificate's name is "
        "the user, over --tls)"))
    return p


def build_parser() -> Parser:
    conn = _connection_options()
    parser = Parser(
        prog="streamlet", parents=[_connection_options(serve=True)],
        description="A stream broker that speaks the RabbitMQ Stream protocol.",
    )
    parser.add_argument("--version", action="version", version=f"streamlet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run a broker", description=(
        "Run a broker. Settings come from defaults, then --config FILE (TOML, see "
        "docs/configuration.md), then environment (STREAMLET_ADVERTISED_HOST/PORT), then flags. "
        "The users file and the TLS certificate are reloaded when their content changes "
        "([server] reload_interval) and on SIGHUP; the rest of the configuration at restart."))
    serve.add_argument("--host", default=argparse.SUPPRESS,
                       help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=port_number, default=argparse.SUPPRESS,
                       help="stream protocol port (default 5552)")
    serve.add_argument("--data-dir", help="where streams are stored (default ./data)")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--advertised-host", help="host clients are told to connect to")
    serve.add_argument("--advertised-port", type=port_number, help="port clients are told to connect to")
    serve.add_argument("--mega-port", type=port_number, default=None, metavar="P",
                       help="serve MEGA (docs/protocols/mega.md) on P, on loopback unless "
                            "configured otherwise; 0 turns it off (default: [listeners.mega], "
                            "none)")
    serve.add_argument("--rsio-port", type=port_number, default=None, metavar="P",
                       help="serve Reactive Streams IO (docs/protocols/reactive-streams.md) on P, "
                            "on loopback unless configured otherwise; 0 turns it off (default: "
                            "[listeners.rsio], none)")
    serve.add_argument("--metrics-port", type=port_number, default=None, metavar="P",
                       help="serve Prometheus metrics at http://HOST:P/metrics (HOST: "
                            "[listeners.metrics] host, else --host); 0 turns it off (default: "
                            "[listeners.metrics], else 15692, skipped with a warning when taken)")
    serve.add_argument("--http-port", type=port_number, default=None, metavar="P",
                       help="serve the management HTTP API (RabbitMQ's /api/ endpoints for "
                            "streams, docs/operations.md) on HOST:P (HOST: [listeners.http] "
                            "host, else --host); 0 turns it off (default: [listeners.http], "
                            "else 15672, skipped with a warning when taken)")
    serve.add_argument("--sbp-port", type=port_number, default=None, metavar="P",
                       help="serve the Streaming Batch Protocol (docs/protocols/sbp.md) on P, on "
                            "loopback unless configured otherwise; 0 turns it off (default: "
                            "[listeners.sbp], none)")
    serve.add_argument("--fsync", choices=["never", "interval", "chunk"],
                       help="when to fsync the log (default never: a confirm means the OS has it)")
    serve.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                       help="DEBUG, INFO, WARNING or ERROR (default INFO)")

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
    _format_option(produce, "each message sent as is (raw), or as an AMQP 1.0 message with the "
                            "input in one data section (amqp), as RabbitMQ's clients send and "
                            "their AMQP decoders expect")
    _protocol_option(produce)

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
    _format_option(consume, "print each body as stored (raw), or the body of an AMQP 1.0 "
                            "message as RabbitMQ's clients publish it (amqp: its data sections, "
                            "or its amqp-value; a message that is not AMQP is printed raw, with "
                            "a warning)")
    _protocol_option(consume)

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
                            "(management API)", parents=[conn, _http_options()], description=(
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
    _list_parsers(sub, conn)
    ping = sub.add_parser("ping", help="check that a broker answers", parents=[conn],
                          description=(
        "Connect and log in (PeerProperties, SASL, Tune, Open), as rabbitmq-diagnostics ping "
        "does: exit 0 and one line with the server's product and version as it announces "
        "them (streamlet's own version beside the RabbitMQ version it announces to clients) "
        "and the time taken, or exit 1 and why (a port that does not speak the RabbitMQ "
        "Stream protocol is named as such, with what answers there)."))
    ping.add_argument("--timeout", type=positive_float, default=10.0,
                      help="seconds to wait for the broker (default 10)")
    _perf_parser(sub, conn)
    _cluster_parser(sub)
    return parser


#: what --log-level takes (any case)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

#: the port a client command connects to by default, per --protocol (--port overrides it)
PROTOCOL_PORTS = {"rabbitmq": 5552, "mega": 5553, "rsio": 5554, "sbp": 5555}


def _format_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--format", choices=("raw", "amqp"), default="raw",
                   help=f"{what} (default raw)")


def _protocol_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--protocol", choices=list(PROTOCOL_PORTS), default="rabbitmq", help=(
        "the wire protocol: rabbitmq (default), mega (docs/protocols/mega.md), rsio (Reactive "
        "Streams IO, docs/protocols/reactive-streams.md) or sbp (docs/protocols/sbp.md); the "
        "default port follows it (5552, 5553, 5554, 5555); mega, rsio and sbp take no "
        "--user/--password/--vhost, --reference or --name, and mega's and sbp's --offset is "
        "first or a number"))


def _perf_parser(sub: argparse._SubParsersAction[Parser], conn: Parser) -> None:
    """`perf`: load in the spirit of RabbitMQ's stream-perf-test (streamlet.perf)."""
    perf = sub.add_parser("perf", help="measure publish and consume rates and latencies",
                          parents=[conn], description=(
        "Producers and consumers on the given streams, each on its own connection, in worker "
        "processes; every message carries its send time. A line a second on stderr (published, "
        "confirmed and consumed msg/s, latency p50/p99 over that second), then a summary on "
        "stdout: totals, rates, publish-to-confirm and publish-to-consume latency percentiles "
        "(consume latency sampled: up to 64 records a chunk). After --time, publishing stops, "
        "the confirms are awaited and the consumers read what was confirmed. Ctrl-C or SIGTERM "
        "ends it early with the summary (exit 130 or 143); exit 1 if a connection was lost or "
        "a publish refused. Speaks only the RabbitMQ Stream protocol, commands RabbitMQ 3.10 "
        "knows, so the same command measures RabbitMQ."))
    perf.add_argument("--producers", type=non_negative_int, default=1,
                      help="producers, each on its own connection (default 1)")
    perf.add_argument("--consumers", type=non_negative_int, default=1,
                      help="consumers, each on its own connection (default 1)")
    which = perf.add_mutually_exclusive_group()
    which.add_argument("--streams", type=_names, metavar="S1,S2,...",
                       help="the streams (producer i publishes to stream i mod S, consumer j "
                            "reads stream j mod S)")
    which.add_argument("--stream-count", type=positive_int, default=1, metavar="N",
                       help="N streams perf-stream-1..N (default 1: perf-stream)")
    perf.add_argument("--rate", type=_rate, default=0, metavar="R",
                      help="messages a second over all producers (default 0: as fast as the "
                           "confirm window allows)")
    perf.add_argument("--size", type=_message_size, default=100, metavar="B",
                      help="message size in bytes, at least 8 (the send time) (default 100)")
    perf.add_argument("--batch-size", type=positive_int, default=100, metavar="N",
                      help="messages per Publish frame (default 100)")
    perf.add_argument("--confirm-window", type=positive_int, default=20000, metavar="N",
                      help="unconfirmed messages a producer may have (default 20000)")
    perf.add_argument("--time", type=positive_float, default=None, metavar="SECONDS",
                      help="publish for this long, then drain and sum up (default: until "
                           "Ctrl-C)")
    perf.add_argument("--offset", choices=("first", "last", "next"), default="next",
                      help="where consumers start (default next: they subscribe before the "
                           "producers start, so they read every message of the run)")
    perf.add_argument("--create", action=argparse.BooleanOptionalAction, default=True,
                      help="create missing streams (default); --no-create: exit 1 if one is "
                           "missing")
    perf.add_argument("--delete-streams", action="store_true",
                      help="delete the streams at the end")
    perf.add_argument("--processes", type=positive_int, default=1, metavar="N",
                      help="worker processes for the producers, and as many for the consumers "
                           "(default 1 each)")
    perf.add_argument("--json", action="store_true", help="the summary as one JSON document")


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one stream name")
    return names


def _message_size(text: str) -> int:
    size = non_negative_int(text)
    if size < 8:
        raise argparse.ArgumentTypeError(f"must be at least 8 (the send time), not {text}")
    return size


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {text}")
    return value


#: the commands that talk to the management HTTP API, not to the stream port
HTTP_COMMANDS = ("connections", "publishers", "consumers")


def _http_options() -> Parser:
    p = Parser(add_help=False)
    g = p.add_argument_group("management API options")
    # SUPPRESS, as the connection options: given at either level, not undone by the other
    g.add_argument("--http-port", type=port_number, default=argparse.SUPPRESS, metavar="P",
                   help="the management API's port (default: the one the broker at "
                        "--host/--port announces; 15672, checked, for a broker that announces "
                        "none, e.g. RabbitMQ)")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="one JSON object a line, as the management API gives it")
    return p


def _list_parsers(sub: argparse._SubParsersAction[Parser], conn: Parser) -> None:
    """`connections list|close`, `publishers list`, `consumers list`: the management API's
    lists (docs/operations.md), filtered by what --user may see."""
    http = _http_options()
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


def is_http_command(args: argparse.Namespace) -> bool:
    return args.command in HTTP_COMMANDS or (args.command == "streams" and args.action == "list")


def _cluster_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """`cluster up|status|down|elect|transfer`: a local cluster of brokers on one host, without
    Kubernetes."""
    from ..cluster.plan import DOWN_TIMEOUT_S, GRACE_S, MAX_NODES

    cluster = sub.add_parser("cluster", help="run a local cluster of brokers (no Kubernetes)",
                             description=(
        "A local cluster: N brokers on consecutive ports of one host, each restarted when it "
        "exits, as a kubelet would. 'up' runs it in the foreground; 'status' and 'down' find "
        "it by its data directory (DATA_DIR/cluster.json); 'elect' and 'transfer' are requests "
        "to its placement driver."))
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = csub.add_parser("up", help="run N brokers, restarting any that exits", description=(
        "Run N brokers in the foreground: node i serves on HOST:PORT+i (its metrics on "
        "15692+i and its management API on 15672+i by default) with its data in "
        "DATA_DIR/node-i, its output in DATA_DIR/node-i/broker.log (or --log-dir), and "
        "cluster.directory_file = DATA_DIR/directory.json; node i is member i of replicated "
        "streams (a Create with initial-cluster-size places members among the nodes). A node "
        "that exits is restarted after 0.5 s, doubling up to 10 s while it keeps failing (reset "
        "once it has run 30 s); if it led replicated streams, a placement driver elects new "
        "leaders at once. "
        f"SIGINT or SIGTERM stops every node (SIGTERM, SIGKILL after {GRACE_S:.0f} s) and "
        "exits 0. Refused (exit 2) when a port is busy or a cluster already runs in DATA_DIR."))
    up.add_argument("--nodes", type=int, default=3, help=(
        f"how many brokers, 1..{MAX_NODES} (default 3): a development cluster on one machine, "
        "where each node is a whole broker process"))
    up.add_argument("--host", default=argparse.SUPPRESS,
                    help="listen (and advertised) address of every node (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=argparse.SUPPRESS,
                    help="node i listens on PORT+i (default 5552)")
    up.add_argument("--data-dir", required=True, help="the cluster's directory (made if missing)")
    up.add_argument("--sbp-port", type=int, default=None, metavar="P", help=(
        "node i also serves the Streaming Batch Protocol on P+i (docs/protocols/sbp.md; "
        "default: off)"))
    up.add_argument("--metrics-port", type=port_number, default=None, metavar="P", help=(
        "node i serves Prometheus metrics on P+i; 0 turns them off on every node (default: "
        "15692+i, off on a node whose port is taken)"))
    up.add_argument("--http-port", type=port_number, default=None, metavar="P", help=(
        "node i serves the management API on P+i (what 'streamlet streams list --port PORT+i' "
        "finds); 0 turns it off on every node (default: 15672+i, off on a node whose port is "
        "taken)"))
    up.add_argument("--log-dir", type=Path, default=None, metavar="DIR", help=(
        "write node i's output to DIR/node-i.log, e.g. on another disk than the data, so a "
        "full data disk does not also swallow the lines saying so (default: "
        "DATA_DIR/node-i/broker.log)"))
    up.add_argument("--config", type=Path, help=(
        "TOML configuration given to every broker (docs/configuration.md; no [tls] or "
        "[listeners], and cluster.directory_file is set by up)"))
    up.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                    help="DEBUG, INFO, WARNING: the supervisor's and every broker's (default INFO)")
    status = csub.add_parser("status", help="show the nodes and replicated streams of a running cluster", description=(
        "Show each node's pid, port, metrics and management API ports, whether it is alive "
        "(its process runs and its port accepts a connection) and where its log is, then each "
        "replicated stream's epoch, leader (marked unclean "
        "when elected by 'elect --force'), members and committed chunk id. Exit 1 when no "
        "cluster runs in DATA_DIR."))
    status.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    status.add_argument("--json", action="store_true", help=(
        'print {"nodes": [{"index", "pid", "port", "alive", "metrics_port", "http_port", '
        '"log"}, ...], "streams": [...]}'))
    down = csub.add_parser("down", help="stop a running cluster", description=(
        "Send SIGTERM to the cluster's supervisor and wait until it has stopped every node and "
        "exited. Exit 1 when no cluster runs in DATA_DIR, or it is still running after --timeout."))
    down.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    down.add_argument("--timeout", type=float, default=DOWN_TIMEOUT_S,
                      help=f"seconds to wait (default {DOWN_TIMEOUT_S:.0f})")
    elect = csub.add_parser("elect", help="allow an unclean election of a stream without a leader",
                            description=(
        "Ask the running placement driver to elect a leader for STREAM, which has none because "
        "no majority of its members can be fenced, among the members that answer: the one "
        "with the highest (epoch, chunk id). UNCLEAN: messages confirmed by the members that "
        "do not answer may be lost (truncated when they come back). Without a majority's "
        "answer nothing is ever elected otherwise. A stream that has a leader is left alone. "
        "Waits until the driver has acted, then prints the stream's leader (recorded as "
        "unclean in 'cluster status'). Exit 1 when no cluster runs in DATA_DIR, the driver "
        "does not act within --timeout, or no member answered."))
    elect.add_argument("stream")
    elect.add_argument("--force", action="store_true", required=True,
                       help="required: the election may lose confirmed messages")
    elect.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    elect.add_argument("--timeout", type=float, default=30.0,
                       help="seconds to wait for the driver (default 30)")
    transfer = csub.add_parser("transfer", help="move a stream's leadership to another member",
                               description=(
        "Ask the running placement driver to make member MEMBER lead STREAM, losing no "
        "confirmed message: the leader stops taking publishes (its publishers are told to look "
        "the leader up again; what it took is still replicated and confirmed), the driver waits "
        "until MEMBER holds the leader's whole log (at most 10 s; otherwise the leader takes "
        "publishes again and nothing changes), then elects in a new epoch with MEMBER "
        "preferred. Waits until the driver has acted and prints the leader. Exit 1 when no "
        "cluster runs in DATA_DIR, the driver does not act within --timeout, or another member "
        "leads."))
    transfer.add_argument("stream")
    transfer.add_argument("--to", type=int, required=True, metavar="MEMBER",
                          help="the member (node index) to lead")
    transfer.add_argument("--data-dir", required=True, help="the directory given to cluster up")
    transfer.add_argument("--timeout", type=float, default=30.0,
                          help="seconds to wait for the driver (default 30)")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse a command line; connection options may come before or after any command word
    (the last one given wins), and those not given get their defaults."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "cluster":
        allowed = ("host", "port") if args.action == "up" else ()
        given = [f"--{k.replace('_', '-')}" for k in (*CONNECTION_DEFAULTS, "password_file")
                 if hasattr(args, k) and k not in allowed]
        if given:
            parser.error(f"{', '.join(given)}: not an option of cluster {args.action}")
        if args.action == "up":
            for key in ("host", "port"):
                if not hasattr(args, key):
                    setattr(args, key, CONNECTION_DEFAULTS[key])
    elif args.command == "serve":
        given = [f"--{k.replace('_', '-')}" for k in (*CONNECTION_DEFAULTS, "password_file")
                 if hasattr(args, k) and k not in ("host", "port")]
        if given:
            parser.error(f"{', '.join(given)}: not an option of serve (users are configured "
                         "in its --config file)")
        for key in ("host", "port"):  # serve's own defaults come from its configuration
            if not hasattr(args, key):
                setattr(args, key, None)
    else:
        if args.command == "produce":
            if args.size is not None and args.count is None:
                parser.error("--size: the size of generated messages, with --count (standard "
                             "input's lines are sent as they are)")
            args.size = 100 if args.size is None else args.size
        if getattr(args, "protocol", "rabbitmq") != "rabbitmq":
            if getattr(args, "format", "raw") != "raw":
                parser.error("--format amqp: RabbitMQ's message format, for --protocol rabbitmq")
            if not hasattr(args, "port"):
                args.port = PROTOCOL_PORTS[args.protocol]
        _credentials(args, parser)
        if is_http_command(args):
            args.vhost_filter = getattr(args, "vhost", None)  # given: narrows the list
            args.http_port = getattr(args, "http_port", None)  # None: the broker's (mgmt.py)
            args.json = getattr(args, "json", False)
            args.stream = getattr(args, "stream", None)
            if getattr(args, "tls", False) or getattr(args, "sasl_mechanism", "PLAIN") != "PLAIN":
                parser.error("--tls, --sasl-mechanism: the management API is plain HTTP with "
                             "--user and --password")
        for key, value in CONNECTION_DEFAULTS.items():
            if not hasattr(args, key):
                setattr(args, key, value)
        tls_only = [f"--{k.replace('_', '-')}" for k in ("ca_cert", "cert", "key")
                    if getattr(args, k) is not None]
        if args.sasl_mechanism == "EXTERNAL":
            tls_only.append("--sasl-mechanism EXTERNAL")
        if tls_only and not args.tls:
            parser.error(f"{', '.join(tls_only)}: only with --tls")
        if args.sasl_mechanism == "EXTERNAL" and args.cert is None:
            parser.error("--sasl-mechanism EXTERNAL: give the client certificate (--cert)")
        if args.tls and getattr(args, "protocol", "rabbitmq") != "rabbitmq":
            parser.error("--tls: for --protocol rabbitmq (the other listeners' TLS is theirs)")
    return args


def _credentials(args: argparse.Namespace, parser: Parser) -> None:
    """User and password not given as flags: from --password-file, then the environment
    (STREAMLET_USER, STREAMLET_PASSWORD), so that they need not be on the command line."""
    if not hasattr(args, "user") and os.environ.get("STREAMLET_USER"):
        args.user = os.environ["STREAMLET_USER"]
    if hasattr(args, "password_file") and not hasattr(args, "password"):
        try:
            lines = args.password_file.read_text().splitlines()
        except OSError as e:
            parser.error(f"--password-file: {e.strerror or e}: {args.password_file}")
        args.password = lines[0] if lines else ""
    elif not hasattr(args, "password") and os.environ.get("STREAMLET_PASSWORD"):
        args.password = os.environ["STREAMLET_PASSWORD"]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "cluster":
        from ..cluster import commands as cluster_commands

        try:
            return cluster_commands.run(args)
        except KeyboardInterrupt:
            return 130
    if is_http_command(args):
        from . import mgmt

        return mgmt.run(args)
    try:
        return asyncio.run(_client_command(args))
    except KeyboardInterrupt:  # before the command caught signals (it sums up after that)
        print("streamlet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `streamlet streams list | head -1`: the reader had enough
        silence_stdout()
        return 0


async def _client_command(args: argparse.Namespace) -> int:
    """A client command, its modules imported when it runs: the RabbitMQ Stream client for
    the rabbitmq protocol, only the chosen one's for --protocol mega|rsio|sbp, never the
    broker."""
    if getattr(args, "protocol", "rabbitmq") != "rabbitmq":
        from . import other_protocols
        from .stop import stoppable

        return await stoppable(lambda: other_protocols.run(args))
    from . import commands

    return await commands.run(args)


def _serve(args: argparse.Namespace) -> int:
    from ..broker import ConfigError, load, run
    from ..dirlock import AlreadyRunning

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load(args.config, host=args.host, port=args.port, data_dir=args.data_dir,
                      advertised_host=args.advertised_host, advertised_port=args.advertised_port,
                      fsync=args.fsync, mega_port=args.mega_port,
                      rsio_port=args.rsio_port, sbp_port=args.sbp_port,
                      metrics_port=args.metrics_port, http_port=args.http_port)
    except ConfigError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        run(config)
    except OSError as e:
        where = e.filename or f"{config.host}:{config.port}"  # the listener's own address
        print(f"streamlet: cannot serve on {where}: {e.strerror}", file=sys.stderr)
        return 1
    except ConfigError as e:  # found when the broker starts, e.g. unreadable TLS certificates
        print(f"streamlet: {e}", file=sys.stderr)
        return 2
    except AlreadyRunning as e:
        print(f"streamlet: another broker{f' (pid {e.pid})' if e.pid else ''} serves from "
              f"{config.data_dir}: one broker per data directory", file=sys.stderr)
        return 2
    logging.getLogger("streamlet").info("served for %.0f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
