"""The operator's leadership as a coordination.k8s.io/v1 Lease (client-go's leader election).

``decide`` is the pure rule: given the Lease as read, whether this replica creates it, takes it
(free, or its holder silent for leaseDurationSeconds on this replica's own clock), renews it,
waits or has lost it. ``LeaderElector`` carries it out, every write a compare-and-swap on the
Lease's resourceVersion. A replica leads from a successful take until a renewal fails for
``renew_deadline`` or another holder is seen: the caller then stops at once. Each take adds one
to leaseTransitions, the fencing token the placement driver sends the brokers (a broker refuses
a lower one). Mechanism: docs/operations.md#operator-high-availability.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from .kube import ApiError, Kube, is_subset

log = logging.getLogger("streamlet_operator.lease")

#: What a read or write of the Lease may fail with and be tried again.
_TRANSIENT = (TimeoutError, ApiError, OSError, aiohttp.ClientError)

#: The fencing token of the Lease this process holds (None: it leads through no Lease).
_token: int | None = None


def fencing_token() -> int | None:
    """This process's fencing token: the Lease's leaseTransitions when it took it."""
    return _token


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet: create it, held, transitions 1
    TAKE = "take"  # free or expired: hold it, transitions + 1 (a new token)
    RENEW = "renew"  # held by this replica, leading: write a new renewTime
    WAIT = "wait"  # another's, not expired
    LOST = "lost"  # leading, but another holds it now


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The Lease's spec as read (a missing holderIdentity or "" is None: free)."""

    holder: str | None
    duration_s: float
    transitions: int
    renew_time: str | None

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> LeaseView:
        spec = body.get("spec") or {}
        return cls(spec.get("holderIdentity") or None, float(spec.get("leaseDurationSeconds") or 0),
                   int(spec.get("leaseTransitions") or 0), spec.get("renewTime"))

    @property
    def record(self) -> tuple[str | None, int, str | None]:
        """What changes whenever its holder writes it (client-go's observed record)."""
        return self.holder, self.transitions, self.renew_time


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    #: leaseTransitions to write (CREATE, TAKE, RENEW): the token while it is held
    transitions: int = 0


def decide(lease: LeaseView | None, me: str, leading: bool, now: float,
           observed_at: float | None) -> Decision:
    """What this replica (``me``; ``leading``: it holds the Lease as far as it knows) does with
    ``lease`` (None: there is none). ``observed_at``: when this replica first saw the Lease's
    current record, on its own monotonic clock as ``now`` (None: just now), so no two replicas'
    clocks are compared. A replica not leading that finds itself the holder (its process
    restarted) takes the Lease again: a new token, never the one a former process used."""
    if lease is None:
        return Decision(Action.CREATE, 1)
    if leading:
        if lease.holder == me:
            return Decision(Action.RENEW, lease.transitions)
        return Decision(Action.LOST)
    if lease.holder is None or lease.holder == me:
        return Decision(Action.TAKE, lease.transitions + 1)
    seen = now if observed_at is None else observed_at
    if now - seen >= lease.duration_s:
        return Decision(Action.TAKE, lease.transitions + 1)
    return Decision(Action.WAIT)


def still_leading(last_renewed: float, now: float, renew_deadline: float) -> bool:
    """Whether a leader whose last successful write was at ``last_renewed`` may still act:
    it stops once ``renew_deadline`` (below the lease duration) passed without one, before any
    other replica can see the Lease expire."""
    return now - last_renewed < renew_deadline


def check_timings(duration: float, renew_deadline: float, retry: float) -> str | None:
    """Why these timings are refused (client-go's rules), None when they are fine."""
    if not 0 < retry < renew_deadline:
        return f"--lease-retry {retry:g} must be above 0 and below --lease-renew-deadline"
    if not renew_deadline < duration:
        return f"--lease-renew-deadline {renew_deadline:g} must be below --lease-duration"
    return None


def _micro_time() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire, renew and release the Lease ``namespace/name`` as ``identity``."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, *,
                 duration: float = 15.0, renew_deadline: float = 10.0,
                 retry: float = 2.0) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.duration, self.renew_deadline, self.retry = duration, renew_deadline, retry
        self.leading = False
        #: the token while leading: leaseTransitions as this replica wrote it
        self.token: int | None = None
        self._observed: tuple[tuple[str | None, int, str | None], float] | None = None
        self.last_renewed = 0.0

    def _spec(self, transitions: int, taking: bool) -> dict[str, Any]:
        now = _micro_time()
        spec: dict[str, Any] = {"holderIdentity": self.identity,
                                "leaseDurationSeconds": max(1, round(self.duration)),
                                "renewTime": now, "leaseTransitions": transitions}
        if taking:
            spec["acquireTime"] = now
        return spec

    async def attempt(self) -> Action:
        """One read and, when the rule says so, one write (a conflict: another wrote first,
        nothing changes here)."""
        started = time.monotonic()  # a write succeeding renews from before it was sent
        body = await self.kube.get("Lease", self.namespace, self.name)
        lease = None if body is None else LeaseView.from_body(body)
        now = time.monotonic()
        if lease is not None and (self._observed is None or self._observed[0] != lease.record):
            self._observed = (lease.record, now)
        decision = decide(lease, self.identity, self.leading, now,
                          None if self._observed is None else self._observed[1])
        try:
            if decision.action is Action.CREATE:
                await self.kube.create({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(decision.transitions, True)})
            elif decision.action in (Action.TAKE, Action.RENEW):
                assert body is not None
                await self.kube.patch("Lease", self.namespace, self.name, {
                    "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                    "spec": self._spec(decision.transitions, decision.action is Action.TAKE)})
        except ApiError as e:
            if e.status != 409:
                raise
            log.debug("lease %s/%s: written by another replica first", self.namespace, self.name)
            return Action.WAIT
        if decision.action in (Action.CREATE, Action.TAKE, Action.RENEW):
            self.last_renewed = started
            if not self.leading:
                self.leading, self.token = True, decision.transitions
        elif decision.action is Action.LOST:
            self.leading = False
        return decision.action

    async def acquire(self) -> int:
        """Wait until this replica holds the Lease; its fencing token."""
        global _token
        waiting_for = None
        while not self.leading:
            try:
                action = await self.attempt()
            except _TRANSIENT as e:
                log.warning("lease %s/%s: cannot be read or written: %s", self.namespace,
                            self.name, e)
                action = Action.WAIT
            if action is Action.WAIT and self._observed is not None:
                holder = self._observed[0][0]
                if holder != waiting_for:
                    log.info("lease %s/%s held by %s: waiting", self.namespace, self.name, holder)
                    waiting_for = holder
            if not self.leading:
                await asyncio.sleep(self.retry)
        assert self.token is not None
        _token = self.token
        log.info("lease %s/%s taken by %s: leading, fencing token %d", self.namespace,
                 self.name, self.identity, self.token)
        return self.token

    async def keep(self) -> str:
        """Renew every ``retry`` seconds while leading; returns why leadership was lost."""
        while True:
            await asyncio.sleep(self.retry)
            left = self.renew_deadline - (time.monotonic() - self.last_renewed)
            try:
                async with asyncio.timeout(max(left, 0.001)):  # a hung API server: no longer
                    action = await self.attempt()
            except _TRANSIENT as e:
                log.warning("lease %s/%s: renewal failed: %s", self.namespace, self.name, e)
                action = Action.WAIT
            if action is Action.LOST:
                holder = None if self._observed is None else self._observed[0][0]
                return f"the lease is held by {holder} now"
            if not still_leading(self.last_renewed, time.monotonic(), self.renew_deadline):
                return f"not renewed for {self.renew_deadline:g} s"

    async def release(self) -> None:
        """Give the Lease up (a stopping leader): the next replica takes it at its next try
        instead of after leaseDurationSeconds. A failed release only costs that wait."""
        global _token
        if not self.leading:
            return
        self.leading, _token = False, None
        try:
            body = await self.kube.get("Lease", self.namespace, self.name)
            if body is None or LeaseView.from_body(body).holder != self.identity:
                return
            await self.kube.patch("Lease", self.namespace, self.name, {
                "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                "spec": {"holderIdentity": None, "leaseDurationSeconds": 1,
                         "renewTime": _micro_time()}})
            log.info("lease %s/%s released", self.namespace, self.name)
        except _TRANSIENT as e:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, e)


#: The annotation a fenced write leaves on the object: the writer's fencing token.
FENCING_ANNOTATION = "operator.streamlet.dev/fencing-token"


async def fenced_apply(kube: Kube, obj: dict[str, Any], token: int | None,
                       attempts: int = 3) -> bool:
    """``kube.apply(obj)`` as the holder of fencing ``token`` (None: no Lease, a plain apply):
    the object keeps the highest writer's token in FENCING_ANNOTATION; one carrying a higher
    token than ``token`` is left alone (False: a newer leader wrote it), else it is written
    with the resourceVersion read as a precondition, so no newer leader's write slips between
    the check and this one (409: read and check again)."""
    if token is None:
        await kube.apply(obj)
        return True
    meta = obj["metadata"]
    kind, namespace, name = obj["kind"], meta.get("namespace", ""), meta["name"]
    desired = {**obj, "metadata": {**meta, "annotations": {
        **(meta.get("annotations") or {}), FENCING_ANNOTATION: str(token)}}}
    for _ in range(attempts):
        current = await kube.get(kind, namespace, name)
        try:
            if current is None:
                await kube.create(desired)
                return True
            written = ((current["metadata"].get("annotations") or {})
                       .get(FENCING_ANNOTATION) or "0")
            if written.isdigit() and int(written) > token:
                log.warning("%s %s/%s not written: written by a newer leader (fencing token %s "
                            "above %d)", kind, namespace, name, written, token)
                return False
            if is_subset(desired, current):
                return True  # as wanted, this token's already: no write
            await kube.patch(kind, namespace, name, {
                **desired, "metadata": {**desired["metadata"],
                                        "resourceVersion": current["metadata"]["resourceVersion"]}})
            return True
        except ApiError as e:
            if e.status != 409:
                raise
    raise ApiError(409, f"{kind} {namespace}/{name}: changed under each of {attempts} writes")
