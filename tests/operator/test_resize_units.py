"""storage.py's decisions, as tables: Kubernetes quantities, and what a change of
spec.storage.size does (old size, new size, the class allows expansion, the PVCs' states)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from streamlet_operator.storage import (
    EXPANSION_NOT_SUPPORTED,
    RESIZED,
    RESIZING,
    SHRINK_REFUSED,
    Volume,
    decide,
    parse_quantity,
)

GI = 2 ** 30


@pytest.mark.parametrize(("text", "value"), [
    ("10Gi", 10 * GI),
    ("1.5Gi", 3 * GI // 2),
    ("10G", 10 * 10 ** 9),
    ("500Mi", 500 * 2 ** 20),
    ("500M", 500 * 10 ** 6),
    ("1Ki", 1024),
    ("1k", 1000),
    ("2Ti", 2 * 2 ** 40),
    ("1Pi", 2 ** 50),
    ("1Ei", 2 ** 60),
    ("1E", 10 ** 18),
    ("2048", 2048),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1e+3", 1000),
    ("500m", Decimal("0.5")),
    (".5Gi", GI // 2),
    (" 3Gi ", 3 * GI),
    (7, 7),
])
def test_parse_quantity(text: str | int, value: int | Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "10GB", "10gi", "ten", "1.2.3Gi", "10 Gi", "--1"])
def test_parse_quantity_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_binary_and_decimal_compare_by_bytes() -> None:
    assert parse_quantity("1Gi") > parse_quantity("1G")
    assert parse_quantity("1024Mi") == parse_quantity("1Gi")


def vols(*specs: tuple[str | None, str | None, bool]) -> list[Volume]:
    return [Volume(f"data-b-{i}", r, c, p) for i, (r, c, p) in enumerate(specs)]


AT10 = vols(("10Gi", "10Gi", False), ("10Gi", "10Gi", False))
AT20 = vols(("20Gi", "20Gi", False), ("20Gi", "20Gi", False))


@pytest.mark.parametrize(
    ("wanted", "template", "expandable", "volumes", "status", "reason", "patch", "replace",
     "warning"), [
        # unchanged, never resized: a condition says all is well (the executor writes it only
        # once one exists)
        ("10Gi", "10Gi", None, AT10, True, RESIZED, (), False, False),
        # no StatefulSet yet: made with the size asked for
        ("10Gi", None, None, [], None, "", (), False, False),
        # grown, class allows: patch both, replace the StatefulSet
        ("20Gi", "10Gi", True, AT10, False, RESIZING, ("data-b-0", "data-b-1"), True, False),
        # the same size spelled otherwise is no change
        ("10240Mi", "10Gi", None, AT10, True, RESIZED, (), False, False),
        # grown, class does not allow: nothing, warned
        ("20Gi", "10Gi", False, AT10, False, EXPANSION_NOT_SUPPORTED, (), False, True),
        # grown, no class found: nothing, warned
        ("20Gi", "10Gi", None, AT10, False, EXPANSION_NOT_SUPPORTED, (), False, True),
        # shrunk: refused whatever the class
        ("5Gi", "10Gi", True, AT10, False, SHRINK_REFUSED, (), False, True),
        ("9.9Gi", "10Gi", True, AT10, False, SHRINK_REFUSED, (), False, True),
        # after the replace: requested, the volumes growing
        ("20Gi", "20Gi", True, vols(("20Gi", "10Gi", False), ("20Gi", "20Gi", False)),
         False, RESIZING, (), False, False),
        # a file system resize pending: not done yet
        ("20Gi", "20Gi", True, vols(("20Gi", "20Gi", True), ("20Gi", "20Gi", False)),
         False, RESIZING, (), False, False),
        # a PVC still asking the old size (made from the old template, or a failed patch)
        ("20Gi", "20Gi", True, vols(("10Gi", "10Gi", False), ("20Gi", "20Gi", False)),
         False, RESIZING, ("data-b-0",), False, False),
        # ... and a class that does not allow it
        ("20Gi", "20Gi", False, vols(("10Gi", "10Gi", False), ("20Gi", "20Gi", False)),
         False, EXPANSION_NOT_SUPPORTED, (), False, True),
        # capacity not reported yet
        ("20Gi", "20Gi", True, vols(("20Gi", None, False)), False, RESIZING, (), False, False),
        # all there
        ("20Gi", "20Gi", True, AT20, True, RESIZED, (), False, False),
        # a volume larger than asked (grown by hand) counts as done
        ("20Gi", "20Gi", None, vols(("30Gi", "30Gi", False)), True, RESIZED, (), False, False),
    ])
def test_decide(wanted: str, template: str | None, expandable: bool | None,
                volumes: list[Volume], status: bool | None, reason: str,
                patch: tuple[str, ...], replace: bool, warning: bool) -> None:
    plan = decide(wanted, template, expandable, volumes, "fast")
    assert (plan.status, plan.reason, plan.patch, plan.replace_statefulset, plan.warning) == (
        status, reason, patch, replace, warning), plan.message


def test_messages_say_why() -> None:
    assert "cannot shrink; set it back to 10Gi" in decide("5Gi", "10Gi", True, AT10).message
    assert "StorageClass 'slow' does not allow volume expansion" in decide(
        "20Gi", "10Gi", False, AT10, "slow").message
    assert "the default StorageClass not found" in decide("20Gi", "10Gi", None, AT10).message
    pending = decide("20Gi", "20Gi", True, vols(("20Gi", "20Gi", True), ("20Gi", "20Gi", False)))
    assert "1 of 2 done" in pending.message and "pending on data-b-0" in pending.message
