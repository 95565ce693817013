"""Argument types and a parser whose errors are one line."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, TypeVar

_N = TypeVar("_N", int, float)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (the usage is in --help), exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def positive_int(text: str) -> int:
    return _at_least(_parse(text, int), 1, text)


def non_negative_int(text: str) -> int:
    return _at_least(_parse(text, int), 0, text)


def positive_float(text: str) -> float:
    value = _parse(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def port(text: str) -> int:
    value = _at_least(_parse(text, int), 0, text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, not {text}")
    return value


def _parse(text: str, kind: type[_N]) -> _N:
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None


def _at_least(value: int, least: int, text: str) -> int:
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, not {text}")
    return value
