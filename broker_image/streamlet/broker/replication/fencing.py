"""The placement driver's fencing tokens as this broker has seen them.

A driver elected through a Kubernetes Lease sends its token (the Lease's leaseTransitions when it
took it) as a client property; ``admit`` refuses a request carrying a token below the highest
seen (streamlet.replication.requests.token_refusal), counts and returns why. A higher token is
written to ``<data dir>/driver-token`` (fsync, rename) before the request is acted on, so a
restarted broker still refuses a deposed driver. A request without a token is taken.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ...replication.requests import token_refusal

log = logging.getLogger("streamlet.broker")

FILE = "driver-token"


class DriverFencing:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE
        #: the highest token seen (0: none yet)
        self.highest = self._load()
        #: requests refused for a stale token, by command name
        self.refused: dict[str, int] = {}

    def _load(self) -> int:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return 0
        except OSError as e:
            log.error("cannot read %s (%s): fencing tokens start again from 0", self.path, e)
            return 0
        if not text.isdigit():
            log.error("%s holds %r, not a token: fencing tokens start again from 0", self.path,
                      text[:40])
            return 0
        return int(text)

    def admit(self, token: str | None, what: str) -> str | None:
        """Why ``what`` (a command's name) carrying ``token`` is refused, None when it is taken
        (a higher token saved first)."""
        why = token_refusal(token, self.highest)
        if why is not None:
            self.refused[what] = self.refused.get(what, 0) + 1
            return why
        if token is not None and int(token) > self.highest:
            self._save(int(token))
            log.info("placement driver fencing token %d (was %d)", int(token), self.highest)
            self.highest = int(token)
        return None

    def _save(self, token: int) -> None:
        tmp = self.path.with_name(FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, f"{token}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
