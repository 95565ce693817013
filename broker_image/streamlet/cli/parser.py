"""The top-level parser and what the commands share: the connection options (accepted before
or after any command word, the last one given winning), the management API's options,
--format and --protocol, and the checks that fill in and refuse connection options once a
command line is parsed. Parse errors are one line and exit 2 (values.Parser). Nothing here
imports a client or the broker: `streamlet --help` stays quick."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path

from .. import __version__
from .protocols import DEFAULT, PROTOCOLS
from .values import Parser
from .values import port as port_number

#: the client commands' connection options and their defaults, filled in by :func:`connection`
CONNECTION_DEFAULTS: dict[str, object] = {
    "host": "127.0.0.1", "port": 5552, "user": "guest", "password": "guest", "vhost": "/",
    "tls": False, "ca_cert": None, "cert": None, "key": None, "sasl_mechanism": "PLAIN"}

#: what --log-level takes (any case)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

Commands = argparse._SubParsersAction  # the `streamlet COMMAND` choices, each command adds its own


def program() -> tuple[Parser, Commands[Parser]]:
    """The `streamlet` parser (--version, the connection options), and its COMMAND choices."""
    parser = Parser(
        prog="streamlet", parents=[connection_options(serve=True)],
        description="A stream broker that speaks the RabbitMQ Stream protocol.",
    )
    parser.add_argument("--version", action="version", version=f"streamlet {__version__}")
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def connection_options(serve: bool = False) -> Parser:
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


def http_options() -> Parser:
    """The options of the commands on the management HTTP API."""
    p = Parser(add_help=False)
    g = p.add_argument_group("management API options")
    # SUPPRESS, as the connection options: given at either level, not undone by the other
    g.add_argument("--http-port", type=port_number, default=argparse.SUPPRESS, metavar="P",
                   help="the management API's port (default: the one the broker at "
                        "--host/--port announces; 15672, checked, for a broker that announces "
                        "none, e.g. RabbitMQ); with --tls, its HTTPS port (15671 when none is "
                        "announced), the certificate checked as the stream port's")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="one JSON object a line, as the management API gives it")
    return p


def format_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--format", choices=("raw", "amqp"), default="raw",
                   help=f"{what} (default raw)")


def protocol_option(p: argparse.ArgumentParser) -> None:
    ports = ", ".join(str(row.port) for row in PROTOCOLS.values())
    p.add_argument("--protocol", choices=list(PROTOCOLS), default=DEFAULT, help=(
        "the wire protocol: rabbitmq (default), mega (docs/protocols/mega.md), rsio (Reactive "
        "Streams IO, docs/protocols/reactive-streams.md) or sbp (docs/protocols/sbp.md); the "
        f"default port follows it ({ports}); mega, rsio and sbp take no "
        "--user/--password/--vhost, --reference or --name, and mega's and sbp's --offset is "
        "first or a number"))


def protocol(args: argparse.Namespace, parser: Parser) -> None:
    """--protocol other than RabbitMQ's: no --format amqp, and its port by default."""
    if args.protocol != DEFAULT:
        if args.format != "raw":
            parser.error("--format amqp: RabbitMQ's message format, for --protocol rabbitmq")
        if not hasattr(args, "port"):
            args.port = PROTOCOLS[args.protocol].port


def refuse_connection_options(args: argparse.Namespace, parser: Parser, allowed: Iterable[str],
                              where: str) -> None:
    """The connection options a command does not take, given anyway: a parse error."""
    given = [f"--{k.replace('_', '-')}" for k in (*CONNECTION_DEFAULTS, "password_file")
             if hasattr(args, k) and k not in allowed]
    if given:
        parser.error(f"{', '.join(given)}: not an option of {where}")


def connection(args: argparse.Namespace, parser: Parser, http: bool = False) -> None:
    """A client command's connection options completed: the credentials (:func:`_credentials`),
    the defaults of those not given, and the combinations refused. ``http``: the command talks
    to the management API (HTTPS with --tls; no EXTERNAL; --vhost narrows its list)."""
    _credentials(args, parser)
    if http:
        args.vhost_filter = getattr(args, "vhost", None)  # given: narrows the list
        args.http_port = getattr(args, "http_port", None)  # None: the broker's (mgmt.py)
        args.json = getattr(args, "json", False)
        args.stream = getattr(args, "stream", None)
        if getattr(args, "sasl_mechanism", "PLAIN") != "PLAIN":
            parser.error("--sasl-mechanism: the management API logs in with --user and "
                         "--password (HTTP Basic)")
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
    if args.tls and getattr(args, "protocol", DEFAULT) != DEFAULT:
        parser.error("--tls: for --protocol rabbitmq (the other listeners' TLS is theirs)")


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
