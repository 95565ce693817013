"""Draining a broker pod before its node goes away, decided as pure functions.

A drain is asked for with the annotation ``streamlet.dev/drain``: ``"true"`` on a Pod, or a list
of ordinals on the Broker. While a pod is drained, the streams it leads are transferred to
in-sync members elsewhere, its single-replica streams are moved off, nothing new is placed on
it, and the drain is complete once every stream keeps a quorum in sync without the drained pods
(the Broker's ``Drained`` condition). driver.py carries out the transfers; handlers/stream.py
moves the streams. Mechanism: docs/operations.md#draining-a-pod.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from streamlet.replication.model import quorum

from . import rolling

#: The annotation, on a Pod ("true") or on the Broker (ordinals, comma-separated).
DRAIN = "streamlet.dev/drain"
#: The Broker condition.
DRAINED = "Drained"
#: Its reasons.
COMPLETE = "Drained"
DRAINING = "Draining"
#: Event reasons: a drain seen, complete, ended (the annotation removed).
DRAIN_STARTED = "DrainStarted"
DRAIN_COMPLETE = "DrainComplete"
DRAIN_ENDED = "DrainEnded"


@dataclass(frozen=True)
class Request:
    """The drained ordinals, and the annotation values not understood (ignored, reported)."""

    ordinals: frozenset[int]
    problems: tuple[str, ...] = ()


def requested(broker: Mapping[str, str], pods: Mapping[int, Mapping[str, str]]) -> Request:
    """The drain asked for by the Broker's annotations and its Pods' (ordinal -> annotations)."""
    ordinals: set[int] = set()
    problems: list[str] = []
    value = broker.get(DRAIN)
    if value is not None and value.strip():
        for token in value.split(","):
            text = token.strip()
            if text.isdigit():
                ordinals.add(int(text))
            elif text:
                problems.append(f"Broker {DRAIN}: {text!r} is not a pod ordinal")
    for ordinal, marks in sorted(pods.items()):
        flag = marks.get(DRAIN)
        if flag is None:
            continue
        if flag.strip().lower() == "true":
            ordinals.add(ordinal)
        elif flag.strip().lower() not in ("false", ""):
            problems.append(f"pod {ordinal} {DRAIN}: {flag!r} is neither true nor false")
    return Request(frozenset(ordinals), tuple(problems))


@dataclass(frozen=True)
class Placed:
    """A Stream of the Broker as the drain sees it. Single-replica: ``pods`` are the pods that
    hold it (its placement, and a move's source until the move ends). Replicated: ``pods`` are
    its members, ``leader`` None while it has none, ``in_sync`` None when the driver did not
    look at it this tick."""

    name: str
    pods: tuple[int, ...]
    replicated: bool = False
    leader: int | None = None
    in_sync: frozenset[int] | None = None


@dataclass(frozen=True)
class Progress:
    """Where a drain stands: ``complete`` (the condition's status), what is left per stream,
    and the leadership transfers to make now: (stream, target ordinal)."""

    complete: bool
    reason: str
    message: str
    left: tuple[str, ...] = ()
    transfers: tuple[tuple[str, int], ...] = ()


def must_move(ordinal: int | None, drained: Collection[int], *, created: bool, replicas: int,
              moving: bool, pods: int) -> bool:
    """Whether the Stream reconciler starts moving a single-replica stream placed on pod
    ``ordinal`` off a drained pod: created there, not moving already, and some pod of the
    ``pods`` not drained to take it (else it stays, and the condition says so)."""
    return (ordinal is not None and ordinal in drained and created and replicas == 1
            and not moving and any(p not in drained for p in range(pods)))


def pod_names(broker: str, ordinals: Iterable[int]) -> str:
    return ", ".join(f"{broker}-{o}" for o in sorted(ordinals))


def progress(drained: Collection[int], streams: Sequence[Placed], pods: int,
             broker: str) -> Progress:
    """What is left of the drain of ``drained`` (the Broker ``broker`` of ``pods`` pods).

    Left: a single-replica stream on a drained pod (being moved); a replicated stream led from
    one (its leadership transferred now to an in-sync member on a pod not drained: the one
    leading fewest, then the lowest ordinal; none in sync there: it waits); a replicated stream
    with members there whose in-sync members elsewhere are fewer than its quorum (taking the
    pods away would leave it unwritable: it waits for them to catch up), or not looked at yet.
    """
    gone = set(drained)
    where = pod_names(broker, gone)
    if not gone:
        return Progress(True, COMPLETE, "no pod is drained")
    left: list[str] = []
    transfers: list[tuple[str, int]] = []
    kept: list[str] = []
    states = [rolling.StreamState(s.name, s.pods, s.leader, s.in_sync)
              for s in streams if s.replicated]
    led = rolling.leading(states)
    for s in sorted(streams, key=lambda s: s.name):
        on = sorted(gone & set(s.pods))
        if not on:
            continue
        if not s.replicated:
            nowhere = all(p in gone for p in range(pods))
            left.append(f"{s.name} (on {pod_names(broker, on)}"
                        + (", no pod left to move it to)" if nowhere else ", moving)"))
            continue
        if s.in_sync is None:
            left.append(f"{s.name} (being elected or not looked at yet)")
            continue
        if s.leader is not None and s.leader in gone:
            state = rolling.StreamState(s.name, s.pods, s.leader, s.in_sync)
            target = rolling.transfer_target(state, s.leader, (), led, avoid=gone)
            if target is None:
                left.append(f"{s.name} (led from {broker}-{s.leader}, no member in sync"
                            " elsewhere)")
            else:
                transfers.append((s.name, target))
                led[target] = led.get(target, 0) + 1
                left.append(f"{s.name} (leadership moving to {broker}-{target})")
            continue
        staying = (s.in_sync & set(s.pods)) - gone
        need = quorum(len(s.pods))
        if len(staying) < need:
            left.append(f"{s.name} ({len(staying)} member(s) in sync elsewhere, {need}"
                        " needed)")
        else:
            kept.append(s.name)
    if left:
        return Progress(False, DRAINING,
                        f"{len(left)} stream{'s' if len(left) != 1 else ''} still on {where}: "
                        + "; ".join(left), tuple(left), tuple(transfers))
    note = (f"; replicated streams keep members there (a drain moves none), each with a"
            f" quorum in sync elsewhere: {', '.join(kept)}" if kept else "")
    return Progress(True, COMPLETE, f"nothing leads or is placed on {where}{note}")
