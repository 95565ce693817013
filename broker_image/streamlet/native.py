"""The optional C extensions, and whether this process runs them or their Python twins.

Each C module (``MODULES``) is built at install time when a compiler is there (``optional`` in
pyproject.toml); its Python twin imports it or, failing that, uses its own Python code, which
gives the same results, slower. ``STREAMLET_NO_C`` turns them off before they are imported:
``1`` (or ``yes``, ``true``, ``all``) every one, else a comma-separated list of module names.
A C module is loaded when its twin imported it (it is then in ``sys.modules``). ``loaded``,
``missing_line`` and ``turned_off`` are pure; ``survey`` imports the twins and asks them.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Container, Iterable, Mapping

#: the switch: every C module off (a true value) or the ones named (a comma-separated list)
ENV = "STREAMLET_NO_C"
_ALL = frozenset({"1", "yes", "true", "all", "on"})

#: each C module -> the Python modules that import it (its twins)
TWINS: Mapping[str, tuple[str, ...]] = {
    "streamlet.wire._arena": ("streamlet.wire.framing",),
    "streamlet.rabbitmq._speedups": ("streamlet.rabbitmq.publish",),
    "streamlet.storage._entries": ("streamlet.storage.entries",),
    "streamlet.sbp._flat": ("streamlet.sbp.flat",),
    "streamlet.rsio._runs": ("streamlet.rsio.runs",),
    "streamlet.mega._runs": ("streamlet.mega.runs",),
}
MODULES: tuple[str, ...] = tuple(TWINS)


def turned_off(module: str, switch: str | None) -> bool:
    """Whether ``switch`` (the value of STREAMLET_NO_C, None when unset) turns ``module`` off."""
    value = (switch or "").strip()
    if value.lower() in _ALL:
        return True
    return module in {part.strip() for part in value.split(",")}


def allowed(module: str) -> None:
    """Called by a twin before it imports ``module``: raise ImportError when the switch turns
    it off, so the twin takes its Python path as when the module was never built."""
    if turned_off(module, os.environ.get(ENV)):
        raise ImportError(f"{module}: turned off by {ENV}")


def loaded(modules: Iterable[str], imported: Container[str]) -> dict[str, bool]:
    """Each module name -> whether it is among ``imported`` (the names of loaded modules)."""
    return {name: name in imported for name in modules}


def missing_line(status: Mapping[str, bool], switch: str | None = None) -> str | None:
    """The one line the broker logs at start for the C modules not loaded; None when all are.
    ``switch``: STREAMLET_NO_C's value; the modules it turns off are named apart, as a choice."""
    missing = [name for name, ok in status.items() if not ok]
    if not missing:
        return None
    off = [name for name in missing if turned_off(name, switch)]
    unbuilt = [name for name in missing if name not in off]
    twins = "running their Python twins (slower)"
    said = f"turned off by {ENV}={switch!r}: {', '.join(off)}"
    if not unbuilt:
        return f"C extensions {said}: {twins}"
    return (f"C extensions missing: {', '.join(unbuilt)}: {twins}; build with a compiler (pip "
            "install needs gcc and the Python headers)" + (f"; {said}" if off else ""))


def survey() -> dict[str, bool]:
    """Import every twin (each imports its C module where it can) and say which C modules
    this process loaded."""
    for twins in TWINS.values():
        for twin in twins:
            importlib.import_module(twin)
    return loaded(MODULES, sys.modules)
