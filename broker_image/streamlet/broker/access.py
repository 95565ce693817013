"""Per-user permissions on virtual hosts and streams, as RabbitMQ has them.

Each (user, vhost) has three regular expressions over resource names: configure (create and
delete streams and super streams), write (declare a publisher), read (subscribe, offsets,
stats). A pattern matches anywhere in the name unless anchored (Erlang's ``re:run``, which
RabbitMQ uses, searches as Python's ``re.search`` does), and an empty pattern denies every
name. A user without any [[permissions]] entry keeps full access to every vhost, so a
configuration written before permissions existed works unchanged.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

from .config.model import BrokerConfig, Permission

Kind = Literal["configure", "write", "read"]


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


class AccessControl:
    def __init__(self, config: BrokerConfig) -> None:
        self._perms: dict[tuple[str, str], Permission] = {(p.user, p.vhost): p for p in config.permissions}
        self._restricted = {p.user for p in config.permissions}

    def vhost_allowed(self, user: str, vhost: str) -> bool:
        return user not in self._restricted or (user, vhost) in self._perms

    def allowed(self, user: str, vhost: str, kind: Kind, resource: str) -> bool:
        if user not in self._restricted:
            return True
        perm = self._perms.get((user, vhost))
        if perm is None:
            return False
        pattern: str = getattr(perm, kind)
        return bool(pattern) and _compiled(pattern).search(resource) is not None
