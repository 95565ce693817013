"""`streamlet serve`: run a broker. Its flags are the configuration's (--config FILE, then the
environment, then flags: broker/protocols.py's ``load``); the listeners beside the stream port are
one list (:data:`LISTENERS`), each a --NAME-port flag given to ``load`` as NAME_port. The broker
is imported when serve runs, never to parse. Exit 0 when stopped, 1 when a port cannot be
served, 2 for a configuration refused or a data directory another broker serves from."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .parser import LOG_LEVELS, Commands, refuse_connection_options
from .values import Parser
from .values import port as port_number


def _protocol(title: str, doc: str, name: str) -> str:
    return (f"serve {title} ({doc}) on P, on loopback unless configured otherwise; 0 turns it "
            f"off (default: [listeners.{name}], none)")


#: the listeners beside the stream port, in --help's order: a --NAME-port flag each
LISTENERS = (
    ("mega", _protocol("MEGA", "docs/protocols/mega.md", "mega")),
    ("rsio", _protocol("Reactive Streams IO", "docs/protocols/reactive-streams.md", "rsio")),
    ("metrics", "serve Prometheus metrics at http://HOST:P/metrics (HOST: [listeners.metrics] "
                "host, else --host); 0 turns it off (default: [listeners.metrics], else 15692, "
                "skipped with a warning when taken)"),
    ("http", "serve the management HTTP API (RabbitMQ's /api/ endpoints for streams, "
             "docs/operations.md) on HOST:P (HOST: [listeners.http] host, else --host); 0 turns "
             "it off (default: [listeners.http], else 15672, skipped with a warning when taken)"),
    ("sbp", _protocol("the Streaming Batch Protocol", "docs/protocols/sbp.md", "sbp")),
)


def add_parser(sub: Commands[Parser], conn: Parser) -> None:
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
    for name, what in LISTENERS:
        serve.add_argument(f"--{name}-port", type=port_number, default=None, metavar="P",
                           help=what)
    serve.add_argument("--fsync", choices=["never", "interval", "chunk"],
                       help="when to fsync the log (default never: a confirm means the OS has it)")
    serve.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                       help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    serve.add_argument("--log-format", default="text", choices=("text", "json"),
                       help="text lines (the default) or one JSON object a line: time, level, "
                            "logger, message (and exception)")


def check(args: argparse.Namespace, parser: Parser) -> None:
    refuse_connection_options(args, parser, ("host", "port"),
                              "serve (users are configured in its --config file)")
    for key in ("host", "port"):  # serve's own defaults come from its configuration
        if not hasattr(args, key):
            setattr(args, key, None)


def run(args: argparse.Namespace) -> int:
    import logging
    import time

    from ..broker import ConfigError, load
    from ..broker import run as run_broker
    from ..dirlock import AlreadyRunning
    from .logformat import configure

    configure(args.log_level, args.log_format)
    ports = {f"{name}_port": getattr(args, f"{name}_port") for name, _ in LISTENERS}
    try:
        config = load(args.config, host=args.host, port=args.port, data_dir=args.data_dir,
                      advertised_host=args.advertised_host, advertised_port=args.advertised_port,
                      fsync=args.fsync, **ports)
    except ConfigError as e:
        print(f"streamlet: {e}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        run_broker(config)
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
