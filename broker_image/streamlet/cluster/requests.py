"""Requests to the running placement driver (``cluster elect --force``, ``transfer``,
``members``, ``rebalance``) and to the supervisor (``cluster stop-node``, ``start-node``): one
file each in ``D/requests/``, written whole (a temporary file renamed), read by the driver (or
the supervisor: ``NODE_KINDS``) at every tick and removed once it has acted on it; the command
waits for that, then reads the driver's record and the request's outcome: why the driver did
not do what was asked (``.outcome`` beside the request, written before the request is removed;
none when it was done; a rebalance's names the moves). A file is the
channel because the driver already lives by its files (its record, the directory) and the
command may run as another user or after a driver restart."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

log = logging.getLogger("streamlet.cluster")

FOLDER = "requests"
ELECT = "elect"
TRANSFER = "transfer"
MEMBERS = "members"
REBALANCE = "rebalance"
STOP_NODE = "stop-node"
START_NODE = "start-node"
#: the requests the supervisor takes (the others are the placement driver's)
NODE_KINDS = (STOP_NODE, START_NODE)
DRIVER_KINDS = (ELECT, TRANSFER, MEMBERS, REBALANCE)


@dataclass(frozen=True)
class Request:
    """``elect``: with ``force``, elect the most up-to-date member that answers even without a
    majority (an unclean election) if the stream has no leader. ``transfer``: move leadership to
    member ``to``. ``members``: ``change`` ("add" or "remove") member ``to``. ``rebalance``:
    spread the leaders (no stream). ``stop-node``: stop node ``to`` and keep it down (``wipe``:
    delete its data too); ``start-node``: run it again (no stream)."""

    kind: str
    stream: str = ""
    force: bool = False
    to: int | None = None
    change: str | None = None
    wipe: bool = False

    @property
    def file_name(self) -> str:
        if self.kind in NODE_KINDS:
            return f"{self.kind}-{self.to}.json"
        if self.kind == REBALANCE:
            return f"{self.kind}.json"
        return f"{self.kind}-{quote(self.stream, safe='')}.json"


def path(data_dir: Path, request: Request) -> Path:
    return data_dir / FOLDER / request.file_name


def write(data_dir: Path, request: Request) -> Path:
    """Leave ``request`` for the driver (replacing the same kind of request for the stream)."""
    target = path(data_dir, request)
    target.parent.mkdir(exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"kind": request.kind, "stream": request.stream,
                               "force": request.force, "to": request.to,
                               "change": request.change, "wipe": request.wipe}) + "\n")
    os.replace(tmp, target)
    return target


def read(data_dir: Path, kinds: tuple[str, ...] = DRIVER_KINDS) -> list[Request]:
    """The requests of ``kinds`` waiting, oldest name first; a malformed file is logged and
    removed."""
    out: list[Request] = []
    for p in sorted((data_dir / FOLDER).glob("*.json")):
        try:
            doc = json.loads(p.read_text())
            change = doc.get("change")
            request = Request(str(doc["kind"]), str(doc["stream"]), bool(doc.get("force")),
                              None if doc.get("to") is None else int(doc["to"]),
                              None if change is None else str(change), bool(doc.get("wipe")))
            if request.kind not in DRIVER_KINDS + NODE_KINDS:
                raise ValueError(f"unknown kind {request.kind!r}")
            if request.kind == MEMBERS and (request.change not in ("add", "remove")
                                            or request.to is None):
                raise ValueError("a members request adds or removes one member")
            if request.kind in NODE_KINDS and request.to is None:
                raise ValueError("a node request names its node")
            if request.kind not in kinds:
                continue
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("request %s ignored and removed: %s", p.name, e)
            p.unlink(missing_ok=True)
            continue
        out.append(request)
    return out


def outcome_path(data_dir: Path, request: Request) -> Path:
    return path(data_dir, request).with_suffix(".outcome")


def done(data_dir: Path, request: Request, why_not: str | None = None) -> None:
    """The driver has acted on ``request``; ``why_not``: why it was not done as asked, for the
    command to print (written first: the command reads it once the request is gone)."""
    if why_not is not None:
        target = outcome_path(data_dir, request)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(why_not + "\n")
        os.replace(tmp, target)
    path(data_dir, request).unlink(missing_ok=True)


def outcome(data_dir: Path, request: Request) -> str | None:
    """Why the driver did not do ``request`` (taken: removed), None when it said nothing."""
    target = outcome_path(data_dir, request)
    try:
        text = target.read_text().strip()
    except OSError:
        return None
    target.unlink(missing_ok=True)
    return text or None
