"""`streamlet perf`'s parser: load in the spirit of RabbitMQ's stream-perf-test; the run itself
(workers, the live line, the summary) is streamlet/perf/'s, imported when it runs."""

from __future__ import annotations

import argparse

from .parser import Commands, connection
from .values import Parser, non_negative_int, positive_float, positive_int


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
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


def check(args: argparse.Namespace, parser: Parser) -> None:
    connection(args, parser)


def run(args: argparse.Namespace) -> int:
    from ..perf.run import perf
    from .stop import run_client, stop

    return run_client(lambda: perf(args, stop.caught))  # its own connections, in worker processes
