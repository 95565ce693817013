"""Replication's decisions as pure functions: the commit rule (:mod:`.commit`), elections
(:mod:`.election`), where a stream's members go (:mod:`.placement`) and what a member checks
of a driver's request, and of a claim about its epoch's leader (:mod:`.requests`).

Shared by the broker (the commit point), the operator (elections, placement, rolls) and the
local ``streamlet cluster`` driver, so it imports none of them: no asyncio, no socket, no
storage, no broker, no kopf or Kubernetes (a contract in ``.importlinter``). Members are pod
ordinals (the reference Metadata gives a broker); :data:`NO_LEADER` (0xFFFF) means none.
"""

from .model import NO_CHUNK, NO_LEADER, EpochAck, Tail, quorum

__all__ = ["NO_CHUNK", "NO_LEADER", "EpochAck", "Tail", "quorum"]
