"""Growing a Broker's volumes, decided as pure functions (resize.py carries it out).

A StatefulSet's ``volumeClaimTemplates`` cannot change, and its PVCs are made once per pod.
When ``spec.storage.size`` grows and the volumes' StorageClass has ``allowVolumeExpansion``,
each existing PVC's request is raised (the CSI driver grows the volume, the kubelet the file
system), and the StatefulSet object is replaced, deleted with its pods orphaned (they keep
running) and made again with the new size, so pods made later get it too. Otherwise nothing
changes and the Broker's ``StorageResized`` condition says why (docs/operations.md, "Growing
storage"). Tests: tests/operator/test_resize_units.py (tables), test_resize.py (end to end).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

#: The Broker condition.
STORAGE_RESIZED = "StorageResized"
#: Its reasons.
RESIZED = "Resized"
RESIZING = "Resizing"
SHRINK_REFUSED = "ShrinkRefused"
EXPANSION_NOT_SUPPORTED = "ExpansionNotSupported"
#: A PVC condition: the volume grew, its file system waits for the kubelet (some drivers:
#: until the pod restarts).
FILE_SYSTEM_RESIZE_PENDING = "FileSystemResizePending"

_SUFFIXES = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


def parse_quantity(text: str | int) -> Decimal:
    """A Kubernetes quantity (``10Gi``, ``1.5G``, ``500Mi``, ``1e9``, ``2048``) in its base
    unit (bytes for storage). ValueError for anything else."""
    if isinstance(text, int):
        return Decimal(text)
    m = _QUANTITY.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a quantity")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation as e:  # the pattern admits only numbers: kept as a guard
        raise ValueError(f"{text!r} is not a quantity") from e
    if suffix not in _SUFFIXES:  # a decimal exponent, e.g. 1e3
        return value * Decimal(10) ** int(suffix[1:])
    return value * _SUFFIXES[suffix]


@dataclass(frozen=True)
class Volume:
    """One pod's PVC: what it asks for and what it has (None: not reported yet)."""

    name: str
    requested: str | None
    capacity: str | None = None
    resize_pending: bool = False  # the FileSystemResizePending condition is True


@dataclass(frozen=True)
class Plan:
    """What to do: the PVCs to patch to the new size, whether to replace the StatefulSet, and
    the condition (``status`` None: none to set, e.g. a size never changed) with whether the
    change deserves a Warning event."""

    status: bool | None
    reason: str = ""
    message: str = ""
    patch: tuple[str, ...] = ()
    replace_statefulset: bool = False
    warning: bool = False


def _below(quantity: str | None, size: Decimal) -> bool:
    return quantity is None or parse_quantity(quantity) < size


def decide(wanted: str, template: str | None, expandable: bool | None,
           volumes: Sequence[Volume], storage_class: str | None = None) -> Plan:
    """The plan for ``spec.storage.size`` ``wanted`` against the StatefulSet's template size
    (None: no StatefulSet yet, it is made with ``wanted``), whether the StorageClass allows
    expansion (None: unknown, no class found) and the existing PVCs.

    Smaller than the template: refused, nothing changes (volumes cannot shrink). Larger: with
    expansion allowed, every PVC asking less is patched and the StatefulSet replaced; without,
    nothing changes. Equal: PVCs still asking less (one made from the old template meanwhile,
    a patch that failed) are patched when expansion is allowed, and the condition reports
    how many volumes have the size, and which wait for their file system to grow."""
    if template is None:
        return Plan(None)
    size, old = parse_quantity(wanted), parse_quantity(template)
    cls = f"StorageClass {storage_class!r}" if storage_class else "the default StorageClass"
    if size < old:
        return Plan(False, SHRINK_REFUSED,
                    f"spec.storage.size {wanted} is below the volumes' {template}: volumes"
                    f" cannot shrink; set it back to {template} or more", warning=True)
    short = tuple(v.name for v in volumes if _below(v.requested, size))
    if size > old or short:
        if expandable is None:
            return Plan(False, EXPANSION_NOT_SUPPORTED,
                        f"{cls} not found: the volumes stay at {template}", warning=True)
        if not expandable:
            return Plan(False, EXPANSION_NOT_SUPPORTED,
                        f"{cls} does not allow volume expansion (allowVolumeExpansion): the"
                        f" volumes stay at {template}", warning=True)
    done = [v for v in volumes if not _below(v.requested, size)
            and not _below(v.capacity, size) and not v.resize_pending]
    pending = sorted(v.name for v in volumes if v.resize_pending)
    if len(done) == len(volumes) and size <= old:
        return Plan(True, RESIZED, f"{len(volumes)} of {len(volumes)} volumes at {wanted}")
    message = f"growing the volumes to {wanted}: {len(done)} of {len(volumes)} done"
    if pending:
        message += (f"; file system resize pending on {', '.join(pending)} (the kubelet grows"
                    " it; with some drivers only once the pod restarts)")
    return Plan(False, RESIZING, message, patch=short, replace_statefulset=size > old)
