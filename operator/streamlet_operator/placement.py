"""Where streams go: pure functions of the cluster state, so they are tested without one."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence


def stream_counts(placements: Iterable[Iterable[int]], replicas: int) -> list[int]:
    """Streams per pod ordinal 0..replicas-1 (ordinals beyond replicas are not counted)."""
    counts = [0] * replicas
    for ordinals in placements:
        for ordinal in ordinals:
            if 0 <= ordinal < replicas:
                counts[ordinal] += 1
    return counts


def place(counts: list[int], weight: int = 1, avoid: Collection[int] = ()) -> int:
    """The pod ordinal for a new stream: the one holding fewest streams, lowest on a tie,
    among those not in ``avoid`` (drained, drain.py); among all when every pod is drained (a
    Stream created then is placed rather than refused; the Drained condition names it).

    ``weight`` is how many broker streams the new resource holds (a super stream's partitions
    all go on one pod); it does not change the choice, only what callers add afterwards.
    """
    if not counts:
        raise ValueError("a broker with no pods has nowhere to place a stream")
    del weight
    allowed = [i for i in range(len(counts)) if i not in avoid] or list(range(len(counts)))
    return min(allowed, key=lambda i: (counts[i], i))


def blocked_scale_down(
    placements: Mapping[str, Iterable[int]], replicas: int
) -> dict[str, list[int]]:
    """Streams (by resource name) placed on pods a scale-down to ``replicas`` would remove."""
    blocked: dict[str, list[int]] = {}
    for name, ordinals in placements.items():
        stranded = sorted(o for o in ordinals if o >= replicas)
        if stranded:
            blocked[name] = stranded
    return blocked


def effective_replicas(desired: int, placements: Mapping[str, Iterable[int]]) -> int:
    """The replica count the StatefulSet may have: never below a pod that holds a stream."""
    highest = max((o for ordinals in placements.values() for o in ordinals), default=-1)
    return max(desired, highest + 1)


def members_held(streams: Iterable[tuple[str, Sequence[int] | None]],
                 pods: int) -> dict[str, list[int]]:
    """The pods each replicated stream (by resource name) keeps: its members, which cannot be
    moved or replaced (membership changes are not built), so a scale-down may not remove
    them; every one of the ``pods`` while its members are not known yet (``None``: created,
    not yet discovered by the placement driver)."""
    return {name: list(members) if members is not None else list(range(pods))
            for name, members in streams}
