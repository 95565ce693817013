"""The optional C extensions: the switch that turns them off (STREAMLET_NO_C), the pure
decisions (which are turned off, which are loaded, the line logged) as tables, and a real
broker process that says at start, once, which are missing and reports each in /metrics
(streamlet_native_extensions{module=...} 1 or 0)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest

from streamlet import native
from tests.support.brokers import BrokerProcess, free_port
from tests.support.scrape import Samples, scrape
from tests.support.waiting import eventually

ALL = ("streamlet.rabbitmq._speedups", "streamlet.storage._entries", "streamlet.sbp._flat")
SAID = ("C extensions missing", "C extensions turned off")


@pytest.mark.parametrize(("module", "switch", "off"), [
    ("streamlet.sbp._flat", None, False),
    ("streamlet.sbp._flat", "", False),
    ("streamlet.sbp._flat", "0", False),
    ("streamlet.sbp._flat", "1", True),
    ("streamlet.sbp._flat", "yes", True),
    ("streamlet.sbp._flat", "TRUE", True),
    ("streamlet.sbp._flat", "all", True),
    ("streamlet.sbp._flat", "streamlet.sbp._flat", True),
    ("streamlet.sbp._flat", "streamlet.storage._entries, streamlet.sbp._flat", True),
    ("streamlet.rabbitmq._speedups", "streamlet.storage._entries,streamlet.sbp._flat", False),
    ("streamlet.sbp._flat", "streamlet.sbp", False),
])
def test_turned_off(module: str, switch: str | None, off: bool) -> None:
    assert native.turned_off(module, switch) is off


@pytest.mark.parametrize(("imported", "expected"), [
    (set(ALL), dict.fromkeys(ALL, True)),
    (set(), dict.fromkeys(ALL, False)),
    ({"streamlet.rabbitmq._speedups", "streamlet.sbp.flat"},
     {ALL[0]: True, ALL[1]: False, ALL[2]: False}),
])
def test_loaded(imported: set[str], expected: dict[str, bool]) -> None:
    assert native.loaded(ALL, imported) == expected


@pytest.mark.parametrize(("status", "switch", "line"), [
    (dict.fromkeys(ALL, True), None, None),
    (dict.fromkeys(ALL, True), "1", None),
    ({}, None, None),
    ({ALL[0]: True, ALL[1]: False, ALL[2]: True}, None,
     "C extensions missing: streamlet.storage._entries: running their Python twins (slower); "
     "build with a compiler (pip install needs gcc and the Python headers)"),
    (dict.fromkeys(ALL, False), "1",
     "C extensions turned off by STREAMLET_NO_C='1': streamlet.rabbitmq._speedups, "
     "streamlet.storage._entries, streamlet.sbp._flat: running their Python twins (slower)"),
    ({ALL[0]: True, ALL[1]: True, ALL[2]: False}, "streamlet.sbp._flat",
     "C extensions turned off by STREAMLET_NO_C='streamlet.sbp._flat': streamlet.sbp._flat: "
     "running their Python twins (slower)"),
    ({ALL[0]: False, ALL[1]: True, ALL[2]: False}, "streamlet.sbp._flat",
     "C extensions missing: streamlet.rabbitmq._speedups: running their Python twins (slower); "
     "build with a compiler (pip install needs gcc and the Python headers); turned off by "
     "STREAMLET_NO_C='streamlet.sbp._flat': streamlet.sbp._flat"),
    ({ALL[0]: True, ALL[1]: False, ALL[2]: True}, "0",
     "C extensions missing: streamlet.storage._entries: running their Python twins (slower); "
     "build with a compiler (pip install needs gcc and the Python headers)"),
])
def test_missing_line(status: dict[str, bool], switch: str | None, line: str | None) -> None:
    assert native.missing_line(status, switch) == line


def test_every_c_source_is_listed() -> None:
    """A further C extension in pyproject.toml is one more entry in native.TWINS."""
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    built = {m["name"] for m in pyproject["tool"]["setuptools"]["ext-modules"]}
    assert built == set(native.MODULES)


def test_the_switch_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENV, "streamlet.sbp._flat")
    with pytest.raises(ImportError, match="turned off by STREAMLET_NO_C"):
        native.allowed("streamlet.sbp._flat")
    native.allowed("streamlet.storage._entries")  # not named: no error


def lines(b: BrokerProcess) -> list[str]:
    return [line for line in b.log_text().splitlines() if any(said in line for said in SAID)]


async def extensions(port: int) -> dict[str, float]:
    samples: Samples = await scrape(port)
    return {dict(labels)["module"]: v for (name, labels), v in samples.items()
            if name == "streamlet_native_extensions"}


def need_built() -> None:
    for module in native.MODULES:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} was not built here (no compiler at install time)")


@pytest.mark.process  # a broker process
async def test_a_broker_without_one_says_so_once_and_in_metrics(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    need_built()
    port = free_port()
    b = broker_factory(extra_args=["--metrics-port", str(port)],
                       env={native.ENV: "streamlet.sbp._flat"})
    await eventually(lambda: lines(b), timeout=30)
    [line] = lines(b)  # one line, written before the ports listen: no second one follows
    assert ("C extensions turned off by STREAMLET_NO_C='streamlet.sbp._flat': "
            "streamlet.sbp._flat: running their Python twins") in line
    assert "_entries" not in line and "_speedups" not in line
    assert await extensions(port) == {**dict.fromkeys(native.MODULES, 1), "streamlet.sbp._flat": 0}


@pytest.mark.process  # a broker process
async def test_a_broker_with_all_of_them_says_nothing(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    need_built()
    port = free_port()
    b = broker_factory(extra_args=["--metrics-port", str(port)], env={native.ENV: ""})
    assert await extensions(port) == dict.fromkeys(native.MODULES, 1)
    assert lines(b) == []  # it would be logged before the ports listen


@pytest.mark.process  # a broker process
async def test_the_switch_turns_them_all_off(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    port = free_port()
    b = broker_factory(extra_args=["--metrics-port", str(port)], env={native.ENV: "1"})
    await eventually(lambda: lines(b), timeout=30)
    assert "turned off by STREAMLET_NO_C='1'" in lines(b)[0]
    assert "build with a compiler" not in lines(b)[0]  # a choice, not a failed build
    assert all(module in lines(b)[0] for module in native.MODULES)
    assert await extensions(port) == dict.fromkeys(native.MODULES, 0)
