"""Writing back a TOML document read by :mod:`tomllib` (which only reads): enough for a broker's
configuration, so ``cluster up`` can add its keys to the ``--config`` file a user gives.

Strings, integers, floats, booleans, arrays of those, tables and arrays of tables; dates and
times (which no configuration key takes) are refused with ``ValueError``. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def _string(s: str) -> str:
    # JSON's escapes (\" \\ \n \t \uXXXX ...) are TOML's; DEL must be escaped in TOML too
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(k: str) -> str:
    bare = k != "" and all(c.isascii() and (c.isalnum() or c in "-_") for c in k)
    return k if bare else _string(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):  # a table inside an array: inline
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"cannot write {type(v).__name__} values to TOML")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, Mapping) for x in v)


def dumps(doc: Mapping[str, Any]) -> str:
    """``doc`` as TOML text that :func:`tomllib.loads` reads back equal to ``doc``."""
    lines: list[str] = []
    _table(doc, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = [(k, v) for k, v in table.items()
               if not isinstance(v, Mapping) and not _is_table_array(v)]
    for k, v in scalars:
        lines.append(f"{_key(k)} = {_value(v)}")
    for k, v in table.items():
        if isinstance(v, Mapping):
            header = ".".join(_key(p) for p in [*path, k])
            lines.extend(["", f"[{header}]"])
            _table(v, [*path, k], lines)
        elif _is_table_array(v):
            header = ".".join(_key(p) for p in [*path, k])
            for item in v:
                lines.extend(["", f"[[{header}]]"])
                _table(item, [*path, k], lines)
