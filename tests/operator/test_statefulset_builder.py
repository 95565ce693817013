"""The broker pods' resources (defaults when the Broker sets none), the restart value on the
pod template and spec.logging's flags, from builders/statefulset.py, as tables."""

from __future__ import annotations

from typing import Any

import pytest

from streamlet_operator.builders.statefulset import (
    COMMAND,
    DEFAULT_RESOURCES,
    RESTARTED_AT,
    TEMPLATE_HASH,
    build_statefulset,
    template_hash,
    with_restart,
)
from streamlet_operator.model import BrokerModel
from tests.operator.test_broker import broker_body


def _sts(**spec: Any) -> dict[str, Any]:
    body = broker_body("apps", **spec)
    body["metadata"]["uid"] = "u1"
    return build_statefulset(BrokerModel.from_body(body), 3)


@pytest.mark.parametrize(("resources", "expected"), [
    (None, {"requests": {"cpu": "500m", "memory": "512Mi"}}),  # the defaults
    ({"requests": {"cpu": "2"}}, {"requests": {"cpu": "2"}}),  # the Broker's, whole
    ({"limits": {"memory": "1Gi"}}, {"limits": {"memory": "1Gi"}}),
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
     {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}),
])
def test_resources(resources: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    sts = _sts(**({"resources": resources} if resources is not None else {}))
    assert sts["spec"]["template"]["spec"]["containers"][0]["resources"] == expected
    assert DEFAULT_RESOURCES == {"requests": {"cpu": "500m", "memory": "512Mi"}}  # unchanged


@pytest.mark.parametrize(("value", "new_template"), [
    (None, False),
    ("", False),
    ("t1", True),
])
def test_with_restart(value: str | None, new_template: bool) -> None:
    sts = _sts()
    before = sts["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH]
    after = with_restart(sts, value)["spec"]["template"]
    assert (after["metadata"]["annotations"][TEMPLATE_HASH] != before) is new_template
    assert after["metadata"]["annotations"][TEMPLATE_HASH] == template_hash(after)
    assert after["metadata"]["annotations"].get(RESTARTED_AT) == (value or None)
    assert sts["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH] == before  # a copy
    assert with_restart(_sts(), value) == with_restart(sts, value)  # the same value: same hash


@pytest.mark.parametrize(("logging", "flags"), [
    (None, []),  # the command as before: no roll for a Broker without spec.logging
    ({"level": "debug"}, ["--log-level", "DEBUG"]),
    ({"json": True}, ["--log-format", "json"]),
    ({"json": False}, []),
    ({"level": "warning", "json": True}, ["--log-level", "WARNING", "--log-format", "json"]),
])
def test_logging_flags(logging: dict[str, Any] | None, flags: list[str]) -> None:
    sts = _sts(**({"logging": logging} if logging is not None else {}))
    command = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == [*COMMAND, *flags]


def test_the_broker_takes_the_logging_flags() -> None:
    """The command as the broker's own parser reads it: the level and the format it serves."""
    from streamlet.cli.main import parse

    sts = _sts(logging={"level": "debug", "json": True})
    args = parse(sts["spec"]["template"]["spec"]["containers"][0]["command"][1:])
    assert (args.command, args.log_level, args.log_format) == ("serve", "DEBUG", "json")
