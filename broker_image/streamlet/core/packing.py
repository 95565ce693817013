"""How a stream packs publishes into chunks: how many entries the pending chunk may hold, and
when one that is not full is written. Pure: the times of publishes and writes are its inputs.

Under a steady publisher a chunk ends where its entries reach the target, which doubles while
chunks fill and stays while publishes keep coming, so the boundaries do not follow the
machine's speed or load. Time bounds only a chunk that cannot fill: its publishers paused
(PAUSE_S) or it is LIMIT_S old. A stream without load writes each publish on the next loop
turn; a quiet spell shrinks the target, so a burst after it starts with small chunks.
"""

from __future__ import annotations

#: Entries a chunk may hold (its target): CHUNK_MIN_ENTRIES after a quiet spell, twice as many
#: after each chunk that filled, at most CHUNK_MAX_ENTRIES; and ENTRY_BYTES of entries per entry
#: of the target (at most 1 MiB; one bigger entry excepted).
CHUNK_MIN_ENTRIES = 256
CHUNK_MAX_ENTRIES = 4_096
ENTRY_BYTES = 256
#: Each QUIET_S without a publish halves the target (after 40 ms a burst starts at the minimum).
QUIET_S = 0.01
#: A chunk that opens on a loaded stream (a publish came within DENSE_S of the one before, or
#: its last chunk held LOADED_ENTRIES or more) waits to fill once it holds LOADED_ENTRIES:
#: until no publish came for PAUSE_S (a windowed publisher waits for its confirms) or it is
#: LIMIT_S old. A chunk written so halves the target. Any other goes on the next loop turn.
DENSE_S = 0.00025
LOADED_ENTRIES = 64
PAUSE_S = 0.001
LIMIT_S = 0.005

_NEVER = float("-inf")


class Packing:
    """The packing state of one stream: the target, whether it is loaded, the last publish,
    and when the pending chunk opened (took its first publish) and whether it may wait."""

    __slots__ = ("target", "loaded", "last_publish", "opened", "waits")

    def __init__(self) -> None:
        self.target = CHUNK_MIN_ENTRIES  #: entries the pending chunk may hold
        self.loaded = False  #: publishes come fast: a chunk opening now may wait to fill
        self.last_publish = _NEVER
        self.opened = _NEVER
        self.waits = False

    def published(self, now: float) -> None:
        """A publish arrived at ``now``: after a quiet spell the target shrinks, right after
        another the stream is loaded."""
        gap = now - self.last_publish
        if gap >= QUIET_S:
            halvings = int(gap / QUIET_S) if gap < 64 * QUIET_S else 64
            self.target = max(CHUNK_MIN_ENTRIES, self.target >> halvings)
            self.loaded = False
        elif gap < DENSE_S:
            self.loaded = True
        self.last_publish = now

    @property
    def target_bytes(self) -> int:
        """Bytes of entries the pending chunk may hold."""
        return self.target * ENTRY_BYTES

    def open(self, now: float) -> None:
        """The pending chunk takes its first publish at ``now`` (after ``published``)."""
        self.opened, self.waits = now, self.loaded

    def due(self, entries: int) -> float:
        """When the pending chunk, not full, holding ``entries``, is to be written: at once
        (the next loop turn) if it opened without load or is small, else once its publishers
        paused or it is LIMIT_S old, whichever comes first."""
        if not self.waits or entries < LOADED_ENTRIES:
            return self.opened
        return min(self.opened + LIMIT_S, self.last_publish + PAUSE_S)

    def filled(self) -> None:
        """A chunk was written full: the next may hold twice as many."""
        self.target = min(2 * self.target, CHUNK_MAX_ENTRIES)
        self.loaded = True

    def written(self, entries: int) -> None:
        """A chunk of ``entries`` that was not full was written when ``due`` said so."""
        if self.waits and entries >= LOADED_ENTRIES:  # it waited and did not fill: its
            # publishers cannot fill the target
            self.target = max(CHUNK_MIN_ENTRIES, self.target // 2)
        self.loaded = entries >= LOADED_ENTRIES
