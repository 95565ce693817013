"""The `streamlet` command: the parser built from the command modules, each owning its
subparser, its checks once parsed and its run (serve, produce, consume, streams, connections
and the other management API lists, policies, ping, perf, cluster), and dispatch to the one named."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Protocol

from . import cluster, consume, lists, perf, ping, policies, produce, serve, streams
from .parser import Commands, connection_options, program
from .values import Parser


class Command(Protocol):
    """A command module."""

    def add_parser(self, sub: Commands[Parser], conn: Parser) -> None:
        """Add its COMMAND choices, ``conn`` the connection options' parent parser."""

    def check(self, args: argparse.Namespace, parser: Parser) -> None:
        """Complete and check what was parsed (defaults, combinations): parser.error if not."""

    def run(self, args: argparse.Namespace) -> int:
        """Run it: the exit code."""


#: in `streamlet --help`'s order
COMMANDS: tuple[Command, ...] = (serve, produce, consume, streams, lists, policies, ping, perf,
                                 cluster)


def build_parser() -> Parser:
    return build()[0]


def build() -> tuple[Parser, dict[str, Command]]:
    """The parser, and which module owns each COMMAND."""
    parser, sub = program()
    conn = connection_options()
    owners: dict[str, Command] = {}
    for command in COMMANDS:
        before = set(sub.choices)
        command.add_parser(sub, conn)
        owners.update(dict.fromkeys(set(sub.choices) - before, command))
    return parser, owners


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse a command line; connection options may come before or after any command word
    (the last one given wins), and those not given get their defaults."""
    return _parse(argv)[0]


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Command]:
    parser, owners = build()
    args = parser.parse_args(argv)
    command = owners[args.command]
    command.check(args, parser)
    return args, command


def main(argv: Sequence[str] | None = None) -> int:
    args, command = _parse(argv)
    return command.run(args)


if __name__ == "__main__":
    sys.exit(main())
