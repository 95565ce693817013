"""The CLI's tables: which module owns each command, the protocol table behind `produce` and
`consume --protocol` (a row's port is the default, a row's hooks are complete), and serve's
listener flags; both as the broker's own protocol table has them."""

from __future__ import annotations

import inspect

import pytest

from streamlet.cli.main import build, parse
from streamlet.cli.protocols import PROTOCOLS, hooks
from streamlet.cli.serve import LISTENERS


def test_each_command_has_one_owner() -> None:
    _, owners = build()
    assert {name: m.__name__.rsplit(".", 1)[1] for name, m in owners.items()} == {  # type: ignore[attr-defined]
        "serve": "serve", "produce": "produce", "consume": "consume", "streams": "streams",
        "connections": "lists", "publishers": "lists", "consumers": "lists", "ping": "ping",
        "perf": "perf", "cluster": "cluster", "policies": "policies"}


@pytest.mark.parametrize("command", ["produce", "consume"])
@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_a_protocols_port_is_the_default(command: str, name: str) -> None:
    assert parse([command, "s", "--protocol", name]).port == PROTOCOLS[name].port
    assert parse([command, "s", "--protocol", name, "--port", "7000"]).port == 7000


@pytest.mark.parametrize("name", [n for n, row in PROTOCOLS.items() if row.hooks is not None])
def test_a_rows_hooks_are_complete(name: str) -> None:
    module = hooks(name)
    for hook in ("connect", "produce", "consume", "reason"):
        assert callable(getattr(module, hook)), hook
    assert inspect.iscoroutinefunction(module.connect)
    assert all(issubclass(e, Exception) for e in (*module.REFUSALS, *module.NOT_LISTENER))
    assert isinstance(module.NAMED_OFFSETS, bool)


def test_rabbitmq_has_no_hooks() -> None:
    with pytest.raises(ValueError, match="its own"):
        hooks("rabbitmq")


@pytest.mark.parametrize("name", [name for name, _ in LISTENERS])
def test_each_listener_flag_is_parsed(name: str) -> None:
    assert getattr(parse(["serve", f"--{name}-port", "7001"]), f"{name}_port") == 7001
    assert getattr(parse(["serve"]), f"{name}_port") is None  # the configuration's


@pytest.mark.process  # importing the broker runs ldconfig (broker/memory.py finds libc)
def test_the_tables_agree_with_the_brokers() -> None:
    """The CLI's tables are its own (the parser imports no broker): the same protocols, with
    the broker's usual ports; a --NAME-port for each further protocol, and metrics and http."""
    from streamlet.broker.protocols import PROTOCOLS as SPOKEN

    assert {n: row.port for n, row in PROTOCOLS.items()} == {
        p.name: p.default_port for p in SPOKEN}
    assert {name for name, _ in LISTENERS} == {
        p.name for p in SPOKEN if p.settings is not None} | {"metrics", "http"}
