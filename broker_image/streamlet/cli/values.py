"""Argument types and a parser whose errors are one line: each type refuses a bad value with
argparse's ArgumentTypeError, which :class:`Parser` prints as one line (``PROG: argument X:
why (see PROG --help)``) with exit code 2, before anything connects."""

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


#: what consume's --offset takes besides a number and @<ms>
OFFSET_NAMES = ("first", "last", "next")


def offset(text: str) -> str:
    """consume's --offset: first, last or next (any case), an offset (digits), or @ and a
    timestamp in milliseconds; returned as given, names in lower case."""
    if text.lower() in OFFSET_NAMES:
        return text.lower()
    digits = text[1:] if text.startswith("@") else text
    if digits.isascii() and digits.isdigit():
        return text
    raise argparse.ArgumentTypeError(
        f"must be first, last, next, an offset (0, 1, ...) or @ and a timestamp in "
        f"milliseconds (@1767225600000), not {text!r}")


def stream_name(text: str) -> str:
    """A name the broker can make a stream of (core.names.valid_stream_name, the broker's own
    rule: 1 to 255 bytes, no 'amq.' prefix, no NUL or line break)."""
    from ..core.names import valid_stream_name

    why = valid_stream_name(text)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{why}, not {text!r}")
    return text
